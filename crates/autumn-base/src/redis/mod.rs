//! Redis: the [`RedisConnection`] every Redis store of an app shares (one
//! server, or a Redis Cluster given by a `redis+cluster://` URL), the
//! [`RedisLink`] commands run on, and [`RedisError`], why the connection
//! could not be built or checked.

mod connection;
mod error;
mod url;

pub use connection::{RedisConnection, RedisLink};
pub use error::RedisError;
