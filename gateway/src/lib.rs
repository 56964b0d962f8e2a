//! The gateway: the only public entry of the seckill system. It checks bearer tokens, applies
//! the per-user rate limit, sets the identity and request-id headers the services trust, and
//! forwards each public route to the service that owns it.

pub mod auth;
pub mod body;
pub mod closed;
pub mod configuration;
pub mod headers;
pub mod openapi;
pub mod proxy;
pub mod push;
pub mod rate_limit;
pub mod rooms;
pub mod routes;
pub mod sale_state;
pub mod startup;
pub mod state;
pub mod storefront;
pub mod tagged;
