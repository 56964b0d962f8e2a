//! stock-service against a real PostgreSQL: each test has its own database.

mod goods;
mod helpers;
mod ledger;
mod listing;
mod outage;
mod read_bounds;
mod releases;
mod rooms;
mod sale_input;
mod startup;
mod trust;
