//! The app database's pool under one name in every build, for the layers
//! that carry it (the route stack) and the parts that check it (the
//! actuator, launch).

/// The app's pool when `[database] url` is set.
#[cfg(feature = "database")]
pub(crate) type Pool = autumn_base::database::DbPool;
/// No pool in a build without a database backend.
#[cfg(not(feature = "database"))]
pub(crate) type Pool = std::convert::Infallible;
