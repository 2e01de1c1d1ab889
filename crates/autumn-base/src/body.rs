//! Reading a whole body into one buffer, as the guards must (to fingerprint a
//! request, to record a response).
//!
//! ```
//! use autumn_base::body::{Capped, read_capped};
//! use axum::body::Body;
//!
//! # tokio::runtime::Builder::new_current_thread().build().map_err(|e| e.to_string())?.block_on(async {
//! match read_capped(Body::from("a small body"), 1024).await? {
//!     Capped::Whole(data) => assert_eq!(data, "a small body"),
//!     Capped::Over(_body) => unreachable!("within the limit"),
//! }
//! # Ok::<(), axum::Error>(())
//! # }).map_err(|e| e.to_string())?;
//! # Ok::<(), String>(())
//! ```

use axum::body::Body;
use bytes::{Bytes, BytesMut};
use futures_util::{StreamExt as _, stream};
use http_body_util::BodyExt as _;

/// Why a body could not be read whole.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// More than the limit arrived.
    #[error("the body is larger than the limit")]
    TooLarge,
    /// The body failed while streaming.
    #[error(transparent)]
    Failed(axum::Error),
}

/// The body's data, at most `limit` bytes, trailers dropped.
///
/// A body that arrives in one frame (a small request or response) is
/// returned as that frame, with no copy and no buffer list; only a body in
/// several frames is copied into one buffer.
///
/// # Errors
///
/// [`ReadError::TooLarge`] past `limit`, [`ReadError::Failed`] when the body
/// fails while streaming.
pub async fn read_whole(body: Body, limit: usize) -> Result<Bytes, ReadError> {
    match read_capped(body, limit).await {
        Ok(Capped::Whole(data)) => Ok(data),
        Ok(Capped::Over(_)) => Err(ReadError::TooLarge),
        Err(error) => Err(ReadError::Failed(error)),
    }
}

/// A body read up to a limit.
pub enum Capped {
    /// All of it, no more than the limit.
    Whole(Bytes),
    /// More than the limit: the same body again, from its first byte (what
    /// was read, then the rest as it streams), trailers dropped.
    Over(Body),
}

/// Reads `body` whole when it holds at most `limit` bytes; past that, stops
/// reading and hands the body back unread from where it stopped, so the
/// caller can still send all of it.
///
/// # Errors
///
/// The body's error when it fails while streaming.
pub async fn read_capped(mut body: Body, limit: usize) -> Result<Capped, axum::Error> {
    let mut first: Option<Bytes> = None;
    let mut joined: Option<BytesMut> = None;
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        total = total.saturating_add(data.len());
        if total > limit {
            let read = match joined {
                Some(buffer) => buffer.freeze(),
                None => first.unwrap_or_default(),
            };
            let prefix = stream::iter([Ok::<_, axum::Error>(read), Ok(data)]);
            return Ok(Capped::Over(Body::from_stream(
                prefix.chain(body.into_data_stream()),
            )));
        }
        match (&mut joined, first.take()) {
            (Some(buffer), _) => buffer.extend_from_slice(&data),
            (None, None) => first = Some(data),
            (None, Some(earlier)) => {
                let mut buffer = BytesMut::with_capacity(earlier.len() + data.len());
                buffer.extend_from_slice(&earlier);
                buffer.extend_from_slice(&data);
                joined = Some(buffer);
            }
        }
    }
    Ok(Capped::Whole(match joined {
        Some(buffer) => buffer.freeze(),
        None => first.unwrap_or_default(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::stream;

    fn chunked(chunks: &[&'static str]) -> Body {
        let frames: Vec<Result<Bytes, std::io::Error>> = chunks
            .iter()
            .map(|c| Ok(Bytes::from_static(c.as_bytes())))
            .collect();
        Body::from_stream(stream::iter(frames))
    }

    #[tokio::test]
    async fn one_frame_is_returned_as_is_and_several_are_joined() {
        let one = read_whole(chunked(&["abc"]), 10).await.ok();
        assert_eq!(one.as_deref(), Some(&b"abc"[..]));
        let several = read_whole(chunked(&["ab", "", "cd", "e"]), 10).await.ok();
        assert_eq!(several.as_deref(), Some(&b"abcde"[..]));
        let empty = read_whole(chunked(&[]), 10).await.ok();
        assert_eq!(empty.as_deref(), Some(&b""[..]));
    }

    #[tokio::test]
    async fn more_than_the_limit_is_refused_even_across_frames() {
        assert!(read_whole(chunked(&["abc"]), 3).await.is_ok());
        assert!(matches!(
            read_whole(chunked(&["ab", "cd"]), 3).await,
            Err(ReadError::TooLarge)
        ));
    }

    #[tokio::test]
    async fn past_the_cap_the_whole_body_is_handed_back() {
        let Ok(Capped::Over(body)) = read_capped(chunked(&["ab", "cd", "ef"]), 3).await else {
            panic!("over the cap");
        };
        let all = body.collect().await.map(|b| b.to_bytes()).ok();
        assert_eq!(all.as_deref(), Some(&b"abcdef"[..]));
        let within = read_capped(chunked(&["ab", "c"]), 3).await;
        assert!(matches!(within, Ok(Capped::Whole(b)) if b == "abc"));
    }

    #[tokio::test]
    async fn a_failing_stream_is_an_error() {
        let frames: Vec<Result<Bytes, std::io::Error>> = vec![
            Ok(Bytes::from_static(b"ab")),
            Err(std::io::Error::other("reset")),
        ];
        let body = Body::from_stream(stream::iter(frames));
        assert!(matches!(
            read_whole(body, 10).await,
            Err(ReadError::Failed(_))
        ));
    }
}
