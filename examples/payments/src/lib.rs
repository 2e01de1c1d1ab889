//! The payments example: `POST /payments` charges a card once per
//! `Idempotency-Key`, across crashes and retries.
//!
//! `POST /payments` takes `{"account": "acct-1", "amount": 1500}`, asks the
//! payment provider to charge it, and stores the payment row and the
//! response in one transaction with [`IdempotencyTx::commit`]: both commit,
//! or neither does; the 201's `Location` is `GET /payments/{id}`, which
//! shows one payment. `GET /payments` lists the payments and
//! `GET /provider/charges` what the provider was asked for.
//!
//! The provider is a stand-in (see [`provider`]): tables in the same
//! database written through a connection of their own, so its writes commit
//! on their own as a remote service's would. It is called with
//! `IdempotencyContext::scoped_key("charge")`, the same on every retry, and
//! answers a repeated key with the first charge instead of charging again.
//!
//! The data lives in the app database: SQLite (`payments.db`) unless
//! `[database] url` names another (PostgreSQL or SQLite); the idempotency
//! records live there too. See [`config`].
//!
//! For crash drills, `PAYMENTS_PAUSE_BEFORE_COMMIT_MS` makes the handler
//! wait inside its transaction just before the commit, and
//! `PAYMENTS_PAUSE_AFTER_COMMIT_MS` just after it, so a process can be
//! killed at either point.

pub mod provider;
mod store;

use std::time::Duration;

use autumn_web::AppBuilder;
use autumn_web::config::{AutumnConfig, Backend};
use autumn_web::db::{DbBackend, DbPool};
use autumn_web::idempotency::IdempotencyTx;
use autumn_web::openapi::JsonSchema;
use autumn_web::prelude::*;
use axum::Extension;
use serde::{Deserialize, Serialize};

pub use provider::Charge;

/// The database used when `[database] url` is unset.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://payments.db";

/// Milliseconds the handler waits inside its transaction before the commit.
pub const PAUSE_BEFORE_COMMIT_ENV: &str = "PAYMENTS_PAUSE_BEFORE_COMMIT_MS";

/// Milliseconds the handler waits after its transaction committed, before
/// it returns.
pub const PAUSE_AFTER_COMMIT_ENV: &str = "PAYMENTS_PAUSE_AFTER_COMMIT_MS";

/// A payment as stored and returned.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, JsonSchema)]
#[schemars(crate = "autumn_web::openapi::schemars")]
pub struct Payment {
    /// A fresh UUID.
    pub id: String,
    /// The account charged.
    pub account: String,
    /// In cents.
    pub amount: i64,
    /// The provider's charge id.
    pub charge: String,
}

/// What a client posts.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "autumn_web::openapi::schemars")]
pub struct NewPayment {
    /// The account to charge; not blank.
    #[schemars(regex(pattern = r"\S"))]
    account: String,
    /// In cents; at least 1.
    #[schemars(range(min = 1))]
    amount: i64,
}

/// `POST /payments`: validates, charges through the provider, then writes
/// the payment and the response in one transaction.
#[post("/payments")]
pub async fn create_payment(
    idem: IdempotencyTx,
    Extension(pool): Extension<DbPool>,
    Json(new): Json<NewPayment>,
) -> AutumnResult<Response> {
    if new.account.trim().is_empty() {
        return Err(AutumnError::unprocessable("account must not be blank"));
    }
    if new.amount < 1 {
        return Err(AutumnError::unprocessable("amount must be at least 1"));
    }
    // The lock fences the database, not the provider: the provider gets a
    // key of its own that every retry of this request repeats. Without an
    // Idempotency-Key each request is its own charge.
    let provider_key = match idem.context() {
        Some(context) => context.scoped_key("charge"),
        None => uuid::Uuid::new_v4().to_string(),
    };
    let charge = provider::charge(&pool, &provider_key, &new.account, new.amount).await?;
    let payment = Payment {
        id: uuid::Uuid::new_v4().to_string(),
        account: new.account,
        amount: new.amount,
        charge: charge.id,
    };
    let response = store::insert_and_commit(&pool, &idem, &payment).await?;
    if let Some(pause) = pause(PAUSE_AFTER_COMMIT_ENV) {
        tokio::time::sleep(pause).await;
    }
    Ok(response)
}

/// `GET /payments`: every payment, oldest first.
#[get("/payments")]
pub async fn list_payments(Extension(pool): Extension<DbPool>) -> AutumnResult<Json<Vec<Payment>>> {
    Ok(Json(store::list(&pool).await?))
}

/// `GET /payments/{id}`: one payment, or 404.
#[get("/payments/{id}")]
pub async fn show_payment(
    Extension(pool): Extension<DbPool>,
    Path(id): Path<String>,
) -> AutumnResult<Json<Payment>> {
    match store::find(&pool, &id).await? {
        Some(payment) => Ok(Json(payment)),
        None => Err(AutumnError::not_found(format!("no payment {id}"))),
    }
}

/// `GET /provider/charges`: what the provider charged, oldest first, with
/// how often it was asked for each.
#[get("/provider/charges")]
pub async fn list_charges(Extension(pool): Extension<DbPool>) -> AutumnResult<Json<Vec<Charge>>> {
    Ok(Json(provider::charges(&pool).await?))
}

/// The app.
pub fn app() -> AppBuilder {
    autumn_web::app()
        .routes(routes![
            create_payment,
            list_payments,
            show_payment,
            list_charges
        ])
        .idempotent()
}

/// The configuration (files and `AUTUMN_*` variables), with this example's
/// defaults: [`DEFAULT_DATABASE_URL`] when `[database] url` is unset, and
/// the database idempotency backend unless another non-default one is
/// named (only there does `IdempotencyTx` commit the record with the
/// payment).
///
/// # Errors
///
/// The configuration error, as a message.
pub fn config() -> Result<AutumnConfig, String> {
    let mut config = AutumnConfig::load().map_err(|error| error.to_string())?;
    if config.database.url.is_none() {
        config.database.url = Some(DEFAULT_DATABASE_URL.to_owned());
    }
    if config.idempotency.backend == Backend::Memory {
        config.idempotency.backend = Backend::Database;
    }
    Ok(config)
}

/// Creates the example's tables (payments and the provider's) in the
/// database `config` names, when missing.
///
/// # Errors
///
/// A message naming the setting when there is no usable database.
pub async fn create_tables(config: &AutumnConfig) -> Result<(), String> {
    let Some(url) = &config.database.url else {
        return Err("set database.url (AUTUMN_DATABASE__URL)".to_owned());
    };
    let pool = DbPool::new(
        url,
        1,
        Duration::from_millis(config.database.connect_timeout_ms),
    )
    .map_err(|error| format!("cannot use database.url: {error}"))?;
    store::create_tables(&pool)
        .await
        .map_err(|error| format!("cannot create the payments tables: {error}"))
}

/// The pause an environment variable asks for; unset, empty or not a
/// number means none.
fn pause(var: &str) -> Option<Duration> {
    let value = std::env::var(var).ok()?;
    match value.trim().parse::<u64>() {
        Ok(ms) => Some(Duration::from_millis(ms)),
        Err(_) => {
            tracing::warn!(%var, %value, "not a number of milliseconds; no pause");
            None
        }
    }
}

fn is_sqlite(pool: &DbPool) -> bool {
    pool.backend() == DbBackend::Sqlite
}
