//! MySQL's errors as [`LockError`]s: a connection that could not be
//! made, a statement's error (transient or not, by its code), no answer
//! in time.

use super::{ENGINE, Site};
use crate::error::LockError;

/// MySQL's "unknown prepared statement handler" (1243).
pub(super) const UNKNOWN_STATEMENT: u16 = 1243;

/// The server's error code of `e`, if it is the server's.
pub(super) fn server_code(e: &mysql_async::Error) -> Option<u16> {
    match e {
        mysql_async::Error::Server(s) => Some(s.code),
        _ => None,
    }
}

/// A connection that could not be made, as a [`LockError`]: a refusal of
/// the credentials or the database is [`LockError::Config`]; anything
/// else may heal.
pub(super) fn connect_failed(site: &Site, e: &mysql_async::Error) -> LockError {
    match e {
        // Access denied (1045), to the database (1044); unknown database
        // (1049).
        mysql_async::Error::Server(s) if matches!(s.code, 1044 | 1045) => {
            LockError::Config(format!(
                "MySQL at {} refused the credentials: {}",
                site.place(),
                s.message
            ))
        }
        mysql_async::Error::Server(s) if s.code == 1049 => LockError::Config(format!(
            "MySQL at {} has no such database: {}",
            site.place(),
            s.message
        )),
        // Unknown or incorrect time zone (1298): the URL's `time_zone=`.
        mysql_async::Error::Server(s) if s.code == 1298 => LockError::Config(format!(
            "MySQL at {} does not know the URL's time_zone= ({}): give an offset such as \
             %2B00:00, or load the server's time zone tables",
            site.place(),
            s.message
        )),
        _ => connect_error(site, &e.to_string()),
    }
}

pub(super) fn connect_error(site: &Site, reason: &str) -> LockError {
    LockError::unreached(ENGINE, site.place(), site.origin, reason)
}

/// A MySQL error as a [`LockError`], saying whether it may heal (a lost
/// connection, a server going away or shutting down, a deadlock, a lock
/// wait that timed out, a read-only server during a failover).
pub(crate) fn store_error(e: &mysql_async::Error) -> LockError {
    let transient = match e {
        mysql_async::Error::Io(_) => true,
        mysql_async::Error::Driver(d) => matches!(
            d,
            mysql_async::DriverError::ConnectionClosed
                | mysql_async::DriverError::PoolDisconnected
                | mysql_async::DriverError::PacketOutOfOrder
        ),
        // Deadlock (1213), lock deadlock (3058), lock wait timeout (1205),
        // read-only (1290, 1836), shutting down (1053), too many
        // connections (1040), query interrupted (1317), lost (2006, 2013),
        // a prepared statement closed (prepared again next time).
        mysql_async::Error::Server(s) => {
            matches!(
                s.code,
                1213 | 3058
                    | 1205
                    | 1290
                    | 1836
                    | 1053
                    | 1040
                    | 1317
                    | 2006
                    | 2013
                    | UNKNOWN_STATEMENT
            ) || skipped_time(s.code, &s.message)
        }
        _ => false,
    };
    let message = match e {
        mysql_async::Error::Server(s) => format!("{} ({})", s.message, s.code),
        other => other.to_string(),
    };
    LockError::Store {
        engine: ENGINE,
        message,
        transient,
    }
}

/// Whether error `code` with `message` is a time the session's zone
/// skips: "Incorrect datetime value" (1292) for a time within a
/// `TIMESTAMP` column's range (before 2038), which the session's zone
/// cannot convert because its clocks jump over it (the spring-forward hour
/// of a zone with daylight saving, for the UTC times written through a
/// session in that zone, as a ShedLock table's `TIMESTAMP` columns are).
/// It passes once the hour is over: transient. A time past the column's
/// range (a lease past 2038) is refused for good.
fn skipped_time(code: u16, message: &str) -> bool {
    if code != 1292 || !message.contains("datetime value") {
        return false;
    }
    let year = message
        .split_once('\'')
        .and_then(|(_, rest)| rest.get(..4))
        .and_then(|year| year.parse::<u32>().ok());
    year.is_some_and(|year| (1970..2038).contains(&year))
}

pub(crate) fn timeout_error() -> LockError {
    LockError::Store {
        engine: ENGINE,
        message: "no answer within the response timeout".into(),
        transient: true,
    }
}
