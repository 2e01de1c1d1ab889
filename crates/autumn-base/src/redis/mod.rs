//! Redis: the [`RedisConnection`] every Redis store of an app shares (one
//! server, or a Redis Cluster given by a `redis+cluster://` URL), the
//! [`RedisLink`] commands run on, [`RedisTls`], the files a `rediss://`
//! connection trusts and presents, and [`RedisError`], why the connection
//! could not be built or checked.

mod connection;
mod error;
mod tls;
mod url;

pub use connection::{RedisConnection, RedisLink};
pub use error::{RedisError, TlsFile};
pub use tls::RedisTls;
