//! [`Paging`] and [`Page`]: one page of a repository's `list`.

use serde::{Deserialize, Serialize};

/// Which page of a list to read: `page` counts from 1, `per_page` is at
/// most [`Paging::MAX_PER_PAGE`]. Deserialises from a query string
/// (`?page=2&per_page=50`), both optional.
///
/// ```
/// use autumn_core::repository::Paging;
///
/// let paging = Paging::new(3, 1000);
/// assert_eq!((paging.page(), paging.per_page()), (3, Paging::MAX_PER_PAGE));
/// assert_eq!(paging.offset(), 200);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Paging {
    page: u32,
    per_page: u32,
}

impl Default for Paging {
    fn default() -> Self {
        Self::new(1, Self::DEFAULT_PER_PAGE)
    }
}

impl Paging {
    /// Rows per page when none is asked for.
    pub const DEFAULT_PER_PAGE: u32 = 20;
    /// The most rows a page holds, whatever is asked for.
    pub const MAX_PER_PAGE: u32 = 100;

    /// Page `page` (from 1; 0 reads as 1) of `per_page` rows (1 to
    /// [`MAX_PER_PAGE`](Self::MAX_PER_PAGE)).
    pub fn new(page: u32, per_page: u32) -> Self {
        Self {
            page: page.max(1),
            per_page: per_page.clamp(1, Self::MAX_PER_PAGE),
        }
    }

    /// The page number, from 1.
    pub fn page(&self) -> u32 {
        self.page.max(1)
    }

    /// Rows per page.
    pub fn per_page(&self) -> u32 {
        self.per_page.clamp(1, Self::MAX_PER_PAGE)
    }

    /// Rows before this page.
    pub fn offset(&self) -> i64 {
        i64::from(self.page() - 1) * i64::from(self.per_page())
    }

    /// [`per_page`](Self::per_page) as the SQL `LIMIT`.
    pub fn limit(&self) -> i64 {
        i64::from(self.per_page())
    }
}

/// One page of rows, with what a pager needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Page<T> {
    /// The rows, in primary-key order.
    pub items: Vec<T>,
    /// The page number, from 1.
    pub page: u32,
    /// Rows per page.
    pub per_page: u32,
    /// Rows in the whole table.
    pub total: i64,
}

impl<T> Page<T> {
    /// The page `paging` asked for, holding `items` out of `total`.
    pub fn new(items: Vec<T>, paging: Paging, total: i64) -> Self {
        Self {
            items,
            page: paging.page(),
            per_page: paging.per_page(),
            total,
        }
    }

    /// Whether a page follows this one.
    pub fn has_next(&self) -> bool {
        i64::from(self.page) * i64::from(self.per_page) < self.total
    }
}
