//! [`TenancyLayer`]: `[tenancy]` read once, applied to a service.

use std::sync::Arc;

use http::HeaderName;
use tower::Layer;

use super::path::exempt_paths;
use super::resolver::TenantResolver;
use super::service::{Settings, Strategy, TenancyService};
use crate::config::{AutumnConfig, InvalidSetting, TenantStrategy};

/// Resolves each request to a [`Tenant`](super::Tenant).
#[derive(Clone)]
pub(crate) struct TenancyLayer(Arc<Settings>);

impl TenancyLayer {
    /// The layer `[tenancy]` describes; `None` when tenancy is off.
    pub(crate) fn from_config(
        config: &AutumnConfig,
        resolver: Option<Arc<dyn TenantResolver>>,
    ) -> Result<Option<Self>, InvalidSetting> {
        let tenancy = &config.tenancy;
        if !tenancy.enabled {
            return Ok(None);
        }
        let strategy = match tenancy.strategy {
            TenantStrategy::Header => {
                Strategy::Header(HeaderName::try_from(tenancy.header.as_str()).map_err(|_| {
                    InvalidSetting {
                        key: "tenancy.header",
                        message: format!("{:?} is not a valid header name", tenancy.header),
                    }
                })?)
            }
            TenantStrategy::Subdomain => match &tenancy.base_domain {
                Some(domain) => Strategy::Subdomain(format!(".{}", domain.to_ascii_lowercase())),
                None => {
                    return Err(InvalidSetting {
                        key: "tenancy.base_domain",
                        message:
                            "strategy \"subdomain\" needs the domain tenants are subdomains of"
                                .to_owned(),
                    });
                }
            },
            TenantStrategy::Path => Strategy::Path,
            TenantStrategy::Session => Strategy::Session,
        };
        Ok(Some(Self(Arc::new(Settings {
            strategy,
            exempt: exempt_paths(config),
            resolver,
        }))))
    }
}

impl<S> Layer<S> for TenancyLayer {
    type Service = TenancyService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        TenancyService::new(inner, self.0.clone())
    }
}
