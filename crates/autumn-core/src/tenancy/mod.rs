//! Tenancy: which tenant a request belongs to.
//!
//! With `[tenancy] enabled = true`, the tenancy layer (inside the session
//! layer, outside the scope layer) resolves every request but those under an
//! exempt path to a [`Tenant`], by the configured strategy: a header, the
//! subdomain, the first path segment, or an id stored in the session. A
//! [`TenantResolver`] the app plugs in says whether the tenant exists. The
//! resolved tenant, never the raw header, is part of the idempotency scope
//! and, with sessions off, of a submit token's binding (with sessions on,
//! the session alone binds a token).
//!
//! ```text
//! request -> exempt path (/actuator, [tenancy] exempt_paths)? -> on, no tenant
//!         -> id by strategy     none -> 400 tenant_missing
//!         -> well-formed, and the resolver knows it?   no -> 404 tenant_unknown
//!                                                   error -> 503 tenant_unavailable
//!         -> Tenant into the extensions (and, strategy "session", what the
//!            guards need to follow a tenant switch: see `scope::scope_after_run`)
//! ```

mod layer;
mod path;
mod resolver;
mod service;
mod tenant;

pub(crate) use layer::TenancyLayer;
pub(crate) use path::strip_path_tenant;
pub use resolver::{TenantFuture, TenantResolveError, TenantResolver};
pub use tenant::{Tenant, TenantRejection};
