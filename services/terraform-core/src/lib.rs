//! The Terraform/OpenTofu plugin core every cloud's provider shares: the protocol-6
//! Provider service ([`server`]) that plans and applies the same way for every resource,
//! the schemas written here and what follows from them ([`schema`]), cty values
//! ([`cty`]), what a resource and a data source do ([`resource`]), states of earlier and
//! later releases ([`upgrade`]), go-plugin's handshake and AutoMTLS ([`plugin`]), and what
//! `migrate-state` reports ([`migrate`]). Each cloud's resources are a crate of their own
//! (`overcast-terraform-zvirt`, `-dvp`, …) on that cloud's client, as the clouds are.

pub mod cty;
pub mod migrate;
pub mod plugin;
pub mod resource;
pub mod schema;
pub mod server;
pub mod upgrade;
