//! A hold on an engine whose store keeps one record per client and name
//! (etcd, ZooKeeper, the SQL engines, memory): what does not depend on the store,
//! written once below those engines, one idea per file.
//!
//! - [`turns`]: the turns of one client's acquisitions of a name, in
//!   arrival order (only the head of a name's queue has a record in the
//!   store for a plain lock; a fair lock's and a read-write lock's waiters
//!   each have a record of their own), and the client's records per name;
//! - [`record`]: what an engine's record of a hold is ([`Record`]), shared
//!   by the hold and its re-entries; how it learns that the store lost it
//!   ([`Deleted`]); and which re-entries it lets in ([`Downgrade`]);
//! - [`hold`]: one guard's share of a record ([`Hold`]): its token, its
//!   entry in the client's list of holds, its chain's `hold_at_least`
//!   minimum; re-entries counted on the record ([`Counted`]); the chain's
//!   last release gives the record back, finished on the client's runtime
//!   when its caller leaves, and retried on faults ([`give_back_retried`]);
//! - [`take`]: an acquisition on such an engine ([`acquire`], driving the
//!   engine's [`Taking`]): its turn, a re-entry in the scope of its own
//!   hold ([`in_scope`](take::in_scope)), tries in the store until taken or out of time
//!   ([`try_again`](take::try_again));
//! - [`undo`]: the undo of what a failed or dropped acquisition made in
//!   the store ([`Pending`](undo::Pending)).

pub(crate) mod hold;
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
pub(crate) mod line;
pub(crate) mod record;
pub(crate) mod take;
pub(crate) mod turns;
pub(crate) mod undo;

pub(crate) use hold::{Counted, Hold, give_back_retried};
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
pub(crate) use record::give_back_in_order;
pub(crate) use record::{Base, Downgrade, Record, base_of, gone_or_ended, lost, record_fields};
// Through `line` on etcd and ZooKeeper; by name on the others.
#[cfg_attr(
    not(any(feature = "postgres", feature = "mysql", feature = "memory")),
    allow(unused_imports)
)]
pub(crate) use take::holds_of;
pub(crate) use take::{Taken, Taking, acquire, listed, taking_fields, unlist};
#[cfg_attr(not(remote_turns), allow(unused_imports))]
pub(crate) use turns::{Access, Records, Turns, records_of};
pub(crate) use undo::Undo;
