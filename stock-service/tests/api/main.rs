//! stock-service against a real PostgreSQL: each test has its own database.

mod helpers;
mod ledger;
mod goods;
