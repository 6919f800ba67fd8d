//! PostgreSQL's errors as [`LockError`]s: a connection that could not be
//! made, a statement's error (transient or not), no answer in time.

use tokio_postgres::error::SqlState;

use super::{ENGINE, Site};
use crate::error::LockError;

/// A connection that could not be made, as a [`LockError`]: a refusal of
/// the credentials or the database is [`LockError::Config`]; anything
/// else may heal.
pub(super) fn connect_failed(site: &Site, e: &tokio_postgres::Error) -> LockError {
    match e.code() {
        Some(code)
            if *code == SqlState::INVALID_PASSWORD
                || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION =>
        {
            LockError::Config(format!(
                "PostgreSQL at {} refused the credentials: {}",
                site.place(),
                db_message(e)
            ))
        }
        Some(code) if *code == SqlState::INVALID_CATALOG_NAME => LockError::Config(format!(
            "PostgreSQL at {} has no such database: {}",
            site.place(),
            db_message(e)
        )),
        _ => connect_error(site, &db_message(e)),
    }
}

pub(super) fn connect_error(site: &Site, reason: &str) -> LockError {
    LockError::unreached(ENGINE, site.place(), site.origin, reason)
}

/// The server's message for `e`, else the driver's.
fn db_message(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => db.message().to_owned(),
        None => e.to_string(),
    }
}

/// A PostgreSQL error as a [`LockError`], saying whether it may heal (a
/// lost connection, a server shutting down or starting, a serialization
/// failure or deadlock).
pub(crate) fn store_error(e: &tokio_postgres::Error) -> LockError {
    let transient = match e.code() {
        // No answer of the server's: a connection that broke (or an I/O
        // failure beneath it) may heal; a driver's refusal (a type, a
        // parse) will not.
        None => broke(e),
        Some(code) => {
            let class = code.code().get(..2);
            class == Some("08")
                || class == Some("53")
                || *code == SqlState::T_R_SERIALIZATION_FAILURE
                || *code == SqlState::T_R_DEADLOCK_DETECTED
                || *code == SqlState::ADMIN_SHUTDOWN
                || *code == SqlState::CRASH_SHUTDOWN
                || *code == SqlState::CANNOT_CONNECT_NOW
                || *code == SqlState::QUERY_CANCELED
                || *code == SqlState::LOCK_NOT_AVAILABLE
                || *code == SqlState::READ_ONLY_SQL_TRANSACTION
        }
    };
    LockError::Store {
        engine: ENGINE,
        message: db_message(e),
        transient,
    }
}

/// Whether `e` says the connection broke (it closed, or an I/O failure
/// beneath it).
pub(super) fn broke(e: &tokio_postgres::Error) -> bool {
    e.is_closed() || std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
}

pub(super) fn timeout_error() -> LockError {
    LockError::Store {
        engine: ENGINE,
        message: "no answer within the response timeout".into(),
        transient: true,
    }
}
