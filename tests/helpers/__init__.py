"""What several test modules share, so that no test module imports another (tests/test_test_imports.py checks it).

Plain functions and constants live in modules named by their subject. Fixtures that one test folder uses live in
that folder's conftest.py; those that tests in several folders use are defined here and imported by
tests/conftest.py.
"""
