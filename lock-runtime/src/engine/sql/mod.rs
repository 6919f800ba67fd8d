//! What the SQL engines (PostgreSQL, MySQL/MariaDB) share, below them
//! (DESIGN §10): the lock table's name and the URL's `table=` and
//! `keep_rows=`, the checks on a lock name before any write, and a taken
//! row's side ([`hold`]: the record a client keeps of its row, the
//! watchdog renewing every row of the client in one round, `extend`,
//! re-entry and the give-back). What differs is each engine's statements
//! and connections, behind [`Rows`]; and how a waiter learns of a release
//! (a notification on PostgreSQL, polling on MySQL), in each engine's
//! `take`. Semaphores keep their permits in a table beside the lock table
//! ([`permits`]).

pub(crate) mod hold;
pub(crate) mod permits;
pub(crate) mod queue;
pub(crate) mod record;
pub(crate) mod side;
pub(crate) mod table;
pub(crate) mod take;
pub(crate) mod taking;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::runtime::Handle;

pub(crate) use hold::Keeper;
pub(crate) use record::{Record, SqlHold};
pub(crate) use table::Table;

use crate::config::Config;
use crate::error::LockError;
use crate::own::OwnHolds;

/// The table a client uses when its URL names none.
pub(crate) const DEFAULT_TABLE: &str = "distributed_locks";

/// A token a release is told when the holder's row's token may have moved
/// for its own reasons (a re-entry that raced a waiter's mark): no row's
/// token equals it, so PostgreSQL's release announces.
pub(crate) const UNKNOWN_TOKEN: i64 = i64::MIN;

/// The end of a row's holder id while the row is kept only by a
/// `hold_at_least` minimum.
pub(crate) const KEPT: &str = " kept";

/// What an SQL engine does to the rows of taken holds: the statements the
/// shared [`hold`] runs. Every one names the holder id, so it never
/// touches another's row.
pub(crate) trait Rows: Send + Sync + Sized + 'static {
    /// What the client shares with every SQL engine's.
    fn common(&self) -> &Common<Self>;
    /// Renews the rows of `holds` (name, holder id) still held by them to
    /// `lease` from now: for each, whether it was.
    fn renew<'a>(
        &'a self,
        holds: &'a [(&'a str, &'a str)],
        lease: Duration,
    ) -> impl Future<Output = Result<Vec<bool>, LockError>> + Send + 'a;
    /// Frees `holder`'s row of `name` (deleted; with `keep_rows`, its
    /// lease ended) and tells its waiters: whether it was the holder's.
    /// `token` is the row's token as the holder last knew it
    /// ([`UNKNOWN_TOKEN`] when it may have moved): PostgreSQL announces
    /// the name when the row's moved past it, a waiter's mark.
    fn release<'a>(
        &'a self,
        name: &'a str,
        holder: &'a str,
        token: i64,
    ) -> impl Future<Output = Result<bool, LockError>> + Send + 'a;
    /// Keeps `holder`'s row of `name` taken for `left` from now (a
    /// `hold_at_least` minimum), its holder id marked [`KEPT`]: whether it
    /// was the holder's.
    fn keep<'a>(
        &'a self,
        name: &'a str,
        holder: &'a str,
        left: Duration,
    ) -> impl Future<Output = Result<bool, LockError>> + Send + 'a;
    /// Raises the token of `holder`'s held row of `name` (a re-entry's own
    /// token): the token, or `None` when the row is not the holder's.
    fn reenter<'a>(
        &'a self,
        name: &'a str,
        holder: &'a str,
    ) -> impl Future<Output = Result<Option<u64>, LockError>> + Send + 'a;
    /// Moves the end of `holder`'s held row of `name` to `lease` from now,
    /// if later: whether the row is the holder's.
    fn extend<'a>(
        &'a self,
        name: &'a str,
        holder: &'a str,
        lease: Duration,
    ) -> impl Future<Output = Result<bool, LockError>> + Send + 'a;
    /// Renews the held tickets of `holds` (name, holder id; fair locks',
    /// readers' and writers') to `lease` from now, and the readers' rows of
    /// the readers among them to at least that: for each, whether its
    /// ticket was held.
    fn renew_tickets<'a>(
        &'a self,
        holds: &'a [(&'a str, &'a str)],
        lease: Duration,
    ) -> impl Future<Output = Result<Vec<bool>, LockError>> + Send + 'a;
    /// Raises the token of the readers' row of `name` while `holder`'s
    /// ticket holds it (a reader's re-entry): the token, or `None` when it
    /// does not.
    fn reenter_read<'a>(
        &'a self,
        name: &'a str,
        holder: &'a str,
    ) -> impl Future<Output = Result<Option<u64>, LockError>> + Send + 'a;
    /// Renews the live permits of `holds` (name, holder id) to `lease`
    /// from now, and their names' permits' rows to at least that (see
    /// [`permits`]): for each, whether it was renewed.
    fn renew_permits<'a>(
        &'a self,
        holds: &'a [(&'a str, &'a str)],
        lease: Duration,
    ) -> impl Future<Output = Result<Vec<bool>, LockError>> + Send + 'a;
    /// Deletes `holder`'s permit of `name` (and tells the name's waiters):
    /// whether there was one, and the name's permits' row as it was then
    /// ([`permits::Left`]).
    fn drop_permit<'a>(
        &'a self,
        name: &'a str,
        holder: &'a str,
    ) -> impl Future<Output = Result<(bool, permits::Left), LockError>> + Send + 'a;
    /// The permits' row of `name` while it is held ([`permits::Left`]).
    fn permits_left<'a>(
        &'a self,
        name: &'a str,
    ) -> impl Future<Output = Result<permits::Left, LockError>> + Send + 'a;
    /// Frees the permits' row of `name` (and tells the name's waiters) if
    /// its token is still `fence`: whether it did.
    fn free_permits<'a>(
        &'a self,
        name: &'a str,
        fence: i64,
    ) -> impl Future<Output = Result<bool, LockError>> + Send + 'a;
    /// Keeps `holder`'s permit of `name` taken for `left` from now (a
    /// `hold_at_least` minimum), its holder id marked [`KEPT`], and the
    /// name's permits' row at least that long: whether it was the
    /// holder's.
    fn keep_permit<'a>(
        &'a self,
        name: &'a str,
        holder: &'a str,
        left: Duration,
    ) -> impl Future<Output = Result<bool, LockError>> + Send + 'a;
    /// Raises the token of the name's permits' row while `holder`'s permit of
    /// `name` is live (a re-entry's own token): the token, or `None`.
    fn reenter_permit<'a>(
        &'a self,
        name: &'a str,
        holder: &'a str,
    ) -> impl Future<Output = Result<Option<u64>, LockError>> + Send + 'a;
    /// Moves the end of `holder`'s live permit of `name` (and of the
    /// name's permits' row) to `lease` from now, if later: whether it is
    /// the holder's.
    fn extend_permit<'a>(
        &'a self,
        name: &'a str,
        holder: &'a str,
        lease: Duration,
    ) -> impl Future<Output = Result<bool, LockError>> + Send + 'a;
    /// Deletes rows free for longer than `old` (none with `keep_rows`), and
    /// whatever else of the engine's is that stale.
    fn sweep(&self, old: Duration) -> impl Future<Output = Result<(), LockError>> + Send + '_;
}

/// What the tasks of one client on an SQL engine share, whatever the
/// engine (the engine's client derefs to it, and gives it as
/// [`Rows::common`]).
pub(crate) struct Common<S: Rows> {
    /// Random per client: the first half of every holder id.
    pub(crate) id: String,
    pub(crate) config: Config,
    pub(crate) runtime: Handle,
    /// The watchdog.
    pub(crate) keeper: Keeper<S>,
    /// Per name, the turns of its acquisitions (FIFO).
    pub(crate) turns: crate::kept::Turns,
    /// Per name, the turns of its permits' waiters (FIFO): one of them at
    /// a time waits in the store (see [`permits`]).
    pub(crate) permit_turns: crate::kept::Turns,
    /// Per lock name and holder id, its record (for re-entries).
    pub(crate) records: crate::kept::Records<Record<S>>,
    /// This client's live guards, for `inspect`.
    pub(crate) own: OwnHolds,
    /// Per name, how many of this client's acquisitions wait for a
    /// release (see [`waiting`]).
    waiters: Arc<Waiters>,
}

impl<S: Rows> Common<S> {
    /// A client's shared part: `place` says which table of which server it
    /// locks on (see [`waiting`]).
    pub(crate) fn new(config: Config, runtime: Handle, place: String) -> Common<S> {
        let waiters = Arc::new(Waiters {
            place,
            names: Mutex::default(),
        });
        {
            let mut all = WAITERS.lock().unwrap_or_else(|p| p.into_inner());
            all.retain(|w| w.strong_count() > 0);
            all.push(Arc::downgrade(&waiters));
        }
        Common {
            id: uuid::Uuid::new_v4().to_string(),
            config,
            runtime,
            keeper: Keeper::default(),
            turns: crate::kept::Turns::default(),
            permit_turns: crate::kept::Turns::default(),
            records: Mutex::default(),
            own: OwnHolds::default(),
            waiters,
        }
    }

    /// Tells this client's records of lock `name` held by `holders` that
    /// their rows were freed by this client itself: their guards count as
    /// lost at once, not at the watchdog's next round.
    pub(crate) fn deleted(&self, name: &str, holders: &[String]) {
        for record in crate::kept::records_of(&self.records, name) {
            if holders
                .iter()
                .any(|h| h == record.holder() || h.strip_suffix(KEPT) == Some(record.holder()))
            {
                record.gone();
            }
        }
    }

    /// How many holds the watchdog renews.
    pub(crate) fn renewed(&self) -> usize {
        self.keeper.holds()
    }

    /// Counts one acquisition of `name` among the client's waiters while
    /// the result lives.
    pub(crate) fn waiting<'a>(&'a self, name: &'a str) -> Waiting<'a> {
        *self
            .waiters
            .names
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(name.to_owned())
            .or_default() += 1;
        Waiting {
            waiters: &self.waiters,
            name,
        }
    }
}

/// One client's waiters per name, and where it locks.
struct Waiters {
    /// The server and table (an engine's own spelling of them).
    place: String,
    names: Mutex<HashMap<String, usize>>,
}

/// The waiters of this process's clients.
static WAITERS: Mutex<Vec<Weak<Waiters>>> = Mutex::new(Vec::new());

/// How many acquisitions of lock `name` by this process's clients of
/// `place` (a server and table, as the engine spells them) wait for a
/// release. A waiter on an SQL engine leaves no trace of its own in the
/// lock table, so a test awaits its arrival here
/// (`__private::sql_waiting`).
pub(crate) fn waiting(place: &str, name: &str) -> usize {
    let all = WAITERS.lock().unwrap_or_else(|p| p.into_inner()).clone();
    all.iter()
        .filter_map(Weak::upgrade)
        .filter(|w| w.place == place)
        .map(|w| {
            let names = w.names.lock().unwrap_or_else(|p| p.into_inner());
            names.get(name).copied().unwrap_or(0)
        })
        .sum()
}

/// One acquisition counted among its client's waiters while it lives.
pub(crate) struct Waiting<'a> {
    waiters: &'a Waiters,
    name: &'a str,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut names = self.waiters.names.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = names.get_mut(self.name) {
            *n -= 1;
            if *n == 0 {
                names.remove(self.name);
            }
        }
    }
}

/// How a database spells what the shared SQL code needs of it.
pub(crate) struct Dialect {
    /// Its URL scheme.
    pub(crate) scheme: &'static str,
    /// Other schemes that name it.
    pub(crate) aliases: &'static [&'static str],
    /// The longest identifier it takes, in bytes.
    pub(crate) identifier: usize,
    /// The query parameters the engine reads itself, besides `table=` and
    /// `keep_rows=` (never passed to the driver).
    pub(crate) own: &'static [&'static str],
}

/// What a URL says beyond the connection: the table and how rows go, and
/// the URL without them (for the driver).
pub(crate) struct Params {
    pub(crate) table: Table,
    pub(crate) keep_rows: bool,
    /// The URL without `table=`, `keep_rows=` and the dialect's own.
    pub(crate) url: String,
    /// The values of the dialect's own parameters the URL gives, as
    /// written (percent-encoded). (Only MySQL has any.)
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(crate) own: Vec<(&'static str, String)>,
}

impl Params {
    /// Reads `url`'s query parameters `table=` and `keep_rows=` (the
    /// others are the driver's), with the dialect's scheme for its aliases.
    pub(crate) fn parse(url: &str, dialect: &Dialect) -> Result<Params, LockError> {
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let longest = dialect.identifier;
        let mut table = Table::parse(DEFAULT_TABLE, longest)?;
        let mut keep_rows = false;
        let mut rest = Vec::new();
        let mut own = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let key = pair.split_once('=').map(|(key, _)| key);
            if let Some(key) = dialect.own.iter().find(|own| key == Some(**own)) {
                own.push((*key, pair[key.len() + 1..].to_owned()));
                continue;
            }
            match pair.split_once('=') {
                Some(("table", value)) => table = Table::parse(value, longest)?,
                Some(("keep_rows", value)) => {
                    keep_rows = match value {
                        "true" | "1" => true,
                        "false" | "0" => false,
                        other => {
                            return Err(LockError::Config(format!(
                                "keep_rows={other:?}: say true or false"
                            )));
                        }
                    }
                }
                _ => rest.push(pair),
            }
        }
        let base = dialect
            .aliases
            .iter()
            .find_map(|alias| base.strip_prefix(&format!("{alias}://")[..]))
            .map_or_else(
                || base.to_owned(),
                |rest| format!("{}://{rest}", dialect.scheme),
            );
        let url = if rest.is_empty() {
            base
        } else {
            format!("{base}?{}", rest.join("&"))
        };
        Ok(Params {
            table,
            keep_rows,
            url,
            own,
        })
    }
}

/// Refuses a name no SQL lock table can hold faithfully (before any
/// write): a NUL byte (PostgreSQL's text cannot hold one), or more
/// characters than the `name` column takes.
pub(crate) fn check_name(
    name: &str,
    longest: Option<usize>,
    engine: &'static str,
) -> Result<(), LockError> {
    crate::request::check_name(name)?;
    if name.contains('\0') {
        return Err(LockError::BadName {
            name: name.replace('\0', "\\0"),
            reason: match engine {
                "postgres" => {
                    "a name on PostgreSQL must not contain a NUL byte (its text cannot hold one)"
                }
                _ => "a name on an SQL engine must not contain a NUL byte",
            },
        });
    }
    if longest.is_some_and(|longest| name.chars().count() > longest) {
        return Err(LockError::BadName {
            name: name.to_owned(),
            reason: "the name is longer than the lock table's `name` column",
        });
    }
    Ok(())
}

/// The connections of one runtime (`Slot`s, each made when first needed
/// and again after it broke, on that runtime): the client's own, or a
/// caller runtime's (see `crate::near`: a statement's answer then wakes no
/// other thread).
pub(crate) struct Slots<Slot> {
    pub(crate) slots: Vec<Slot>,
    next: std::sync::atomic::AtomicUsize,
}

impl<Slot: Default> Slots<Slot> {
    /// `n` places, none with a connection yet.
    pub(crate) fn new(n: usize) -> Slots<Slot> {
        Slots {
            slots: (0..n).map(|_| Slot::default()).collect(),
            next: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// The place to try first, in turn: callers spread over the places.
    pub(crate) fn next(&self) -> usize {
        self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % self.slots.len()
    }
}

/// The connections for a statement of a caller's task: its runtime's
/// (`near`, `size` places made on its first call) when they are ready,
/// else the client's own `home` (also for a call finished for a caller
/// who left, whose runtime may be gone); and whether they are the
/// client's own.
pub(crate) fn pool_here<Slot: Default + Send + Sync + 'static>(
    home: &Arc<Slots<Slot>>,
    near: &crate::near::Near<Arc<Slots<Slot>>>,
    size: usize,
) -> (Arc<Slots<Slot>>, bool) {
    if crate::background::finishing_for_one_who_left() {
        return (home.clone(), true);
    }
    match near.here(|| async move { Ok::<_, std::convert::Infallible>(Arc::new(Slots::new(size))) })
    {
        Some((_, pool)) => (pool, false),
        None => (home.clone(), true),
    }
}

/// For each of `holds` (name, holder id), whether it is among `found`
/// (the pairs a renewal answered).
pub(crate) fn renewed(holds: &[(&str, &str)], found: &[(String, String)]) -> Vec<bool> {
    holds
        .iter()
        .map(|(name, holder)| found.iter().any(|(n, h)| n == name && h == holder))
        .collect()
}

/// `d` in whole microseconds, for a statement.
pub(crate) fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_with_nul_or_past_the_column_are_refused() {
        assert!(check_name("stock:1", Some(255), "postgres").is_ok());
        assert!(matches!(
            check_name("a\0b", Some(255), "mysql"),
            Err(LockError::BadName { .. })
        ));
        assert!(matches!(
            check_name(&"x".repeat(256), Some(255), "postgres"),
            Err(LockError::BadName { .. })
        ));
        assert!(check_name(&"é".repeat(255), Some(255), "postgres").is_ok());
    }

    #[test]
    fn params_take_table_and_keep_rows_and_leave_the_rest() {
        const PG: Dialect = Dialect {
            scheme: "postgres",
            aliases: &["postgresql"],
            identifier: 63,
            own: &[],
        };
        const MY: Dialect = Dialect {
            scheme: "mysql",
            aliases: &["mariadb"],
            identifier: 64,
            own: &["time_zone"],
        };
        let p = Params::parse(
            "postgresql://u@h/db?table=ops.jobs&keep_rows=true&application_name=x",
            &PG,
        )
        .unwrap();
        assert_eq!(p.table, Table::parse("ops.jobs", 63).unwrap());
        assert!(p.keep_rows);
        assert_eq!(p.url, "postgres://u@h/db?application_name=x");
        let p = Params::parse("mariadb://u@h/db", &MY).unwrap();
        assert_eq!(p.url, "mysql://u@h/db");
        assert!(!p.keep_rows);
        assert!(p.own.is_empty());
        // The dialect's own parameters are taken out, as written.
        let p = Params::parse("mysql://u@h/db?time_zone=%2B00:00&pool_max=4", &MY).unwrap();
        assert_eq!(p.url, "mysql://u@h/db?pool_max=4");
        assert_eq!(p.own, [("time_zone", "%2B00:00".to_owned())]);
        let p = Params::parse("postgres://u@h/db?time_zone=UTC", &PG).unwrap();
        assert_eq!(p.url, "postgres://u@h/db?time_zone=UTC");
        assert!(matches!(
            Params::parse("mysql://u@h/db?keep_rows=yes", &MY),
            Err(LockError::Config(_))
        ));
        let long = format!("mysql://u@h/db?table={}", "t".repeat(64));
        assert!(Params::parse(&long, &MY).is_ok());
        assert!(Params::parse(&long.replace("mysql", "postgres"), &PG).is_err());
    }
}
