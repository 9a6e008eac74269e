"""The mock credentials unknown names are answered with (``walgate.security.scram.mock_credential``): stable per
(key, name), drawn evenly over the real users so a census of answers has the real users' distribution of
iterations, salt lengths and salt alphabets, mostly unmoved when a user is added, and one model user per name for
every mechanism (as a real user's answers all follow its own credentials). Deterministic: a fixed key and names."""

from __future__ import annotations

import string
from collections import Counter

from walgate.security.scram import ScramCredential, credential_from_password, mock_credential, password_credential

KEY = b"k" * 32
NAMES = [f"name-{i}" for i in range(3000)]


def user(iterations: int, salt: bytes | None = None, mechanisms: tuple[str, ...] = ("SCRAM-SHA-256", "SCRAM-SHA-512")
         ) -> dict[str, ScramCredential]:
    return {m: credential_from_password(m, "pw", salt, iterations) for m in mechanisms}


def test_a_name_always_gets_the_same_mock_and_another_key_another_salt():
    users = [user(4096), user(8192)]
    one, again = mock_credential(KEY, "ghost", users, "SCRAM-SHA-256"), mock_credential(KEY, "ghost", users,
                                                                                        "SCRAM-SHA-256")
    assert one == again
    assert mock_credential(b"x" * 32, "ghost", users, "SCRAM-SHA-256").salt != one.salt
    assert mock_credential(KEY, "ghost", users, "SCRAM-SHA-512").salt != one.salt  # a salt per mechanism


def test_the_mocks_have_the_real_users_distribution_of_iterations_and_salts():
    base36 = b"abc123xyz0" * 3  # a salt as Kafka's Java tools make them: base-36 digits, here 30 of them
    users = [user(4096), user(8192, base36[:26]), user(16384)]
    mocks = [mock_credential(KEY, name, users, "SCRAM-SHA-512") for name in NAMES]
    counts = Counter(m.iterations for m in mocks)
    assert set(counts) == {4096, 8192, 16384} and all(800 <= n <= 1200 for n in counts.values()), counts
    for m in mocks:
        assert m.mechanism == "SCRAM-SHA-512"
        if m.iterations == 8192:  # mirrors the user with the base-36 salt
            assert len(m.salt) == 26 and set(m.salt.decode()) <= set(string.digits + string.ascii_lowercase)
        else:
            assert len(m.salt) == 16
    assert len({m.salt for m in mocks}) == len(mocks)
    assert sum(not m.salt.isalnum() for m in mocks if m.iterations == 4096) > 900  # random bytes, as the model's


def test_adding_a_user_moves_only_its_share_of_the_names():
    users = [user(4096), user(8192), user(16384)]
    more = [*users, user(12288)]
    before = [mock_credential(KEY, name, users, "SCRAM-SHA-256").iterations for name in NAMES]
    after = [mock_credential(KEY, name, more, "SCRAM-SHA-256").iterations for name in NAMES]
    moved = [(b, a) for b, a in zip(before, after, strict=True) if b != a]
    assert all(a == 12288 for _, a in moved) and 600 <= len(moved) <= 900  # about a quarter, all to the new user


def test_one_model_user_per_name_for_every_mechanism_and_for_passwords():
    users = [user(4096), user(8192, mechanisms=("SCRAM-SHA-512",)), user(16384)]
    for name in NAMES[:300]:
        sha256 = mock_credential(KEY, name, users, "SCRAM-SHA-256")
        sha512 = mock_credential(KEY, name, users, "SCRAM-SHA-512")
        plain = mock_credential(KEY, name, users)
        assert sha256.iterations == sha512.iterations == plain.iterations
        model = next(u for u in users if u["SCRAM-SHA-512"].iterations == plain.iterations)
        assert plain.mechanism == password_credential(model).mechanism  # the model's PLAIN work: its hash too
        assert sha256.mechanism == "SCRAM-SHA-256"  # a user without it is answered with a mock of the mechanism


def test_without_users_the_mock_is_what_create_user_makes():
    mock = mock_credential(KEY, "ghost", [], "SCRAM-SHA-512")
    assert (mock.mechanism, mock.iterations, len(mock.salt), len(mock.stored_key)) == ("SCRAM-SHA-512", 4096, 16, 64)
