//! The gateway over real HTTP on loopback, in front of small echo upstreams started by the
//! tests. One binary (modules per feature) so it builds once.

mod auth;
mod closed;
mod credentials;
mod forwarding;
mod helpers;
mod identity;
mod limits;
mod openapi;
mod overload;
mod push;
mod read_bounds;
mod rooms;
mod routes;
mod shared_limits;
mod storefront;
