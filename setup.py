"""The one C extension (everything else is in pyproject.toml): walgate.wire._record_check, produce validation.

Optional: without a C compiler the build goes on and walgate.wire.record_batch uses its pure-Python walk, which
gives the same answers (tests/wire/test_record_check.py) some 40 times slower.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("walgate.wire._record_check", ["walgate/wire/_record_check.c"], optional=True)])
