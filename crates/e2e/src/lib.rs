//! End-to-end tests of the whole system live in `tests/`.
