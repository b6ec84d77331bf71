//! What the `discoverer` binary shares with tests: the objects it writes and the list
//! of API calls it makes (the RBAC `deploy/` grants it is tested against that list).

pub mod api_calls;
