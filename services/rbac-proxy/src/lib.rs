//! What the `rbac-proxy` binary shares with tests: the list of API calls it makes.

pub mod api_calls;
