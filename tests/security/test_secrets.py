"""No password of a user statement reaches an answer: the SQL syntax errors quote their statement masked."""

from __future__ import annotations

from pathlib import Path

import pytest

from walgate.security.secrets import mask_secrets
from walgate.storage.engine import Engine
from walgate.storage.errors import StorageError

SECRET = "hunter2-xyz"


@pytest.mark.parametrize("sql", [
    f"CREATE USER bob PASS '{SECRET}",  # no closing quote
    f"CREATE USER bob PASS '{SECRET}' garbage",
    f"CREATE USER bob PASSS '{SECRET}'",
    f"CREATE USER bob PASS {SECRET}",  # not quoted: the parser names it as the token it did not expect
    f"CREATE USER b:ob PASS '{SECRET}'",
    f"ALTER USER bob PASS \"{SECRET}\" x",
])
def test_a_refused_user_statement_never_quotes_its_password(tmp_path: Path, sql: str):
    engine = Engine.open(tmp_path)
    try:
        with pytest.raises(StorageError) as refused:
            engine.execute(sql)
        assert SECRET not in str(refused.value) and "statement" in str(refused.value)
    finally:
        engine.close()


def test_mask_secrets_masks_values_quoted_out_of_context():
    assert mask_secrets(f"unexpected '{SECRET}'", f"CREATE USER x PASS {SECRET}") == "unexpected '***'"
    assert mask_secrets("token=abc&x=1") == "token=***&x=1"
