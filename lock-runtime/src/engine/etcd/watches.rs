//! The client's one watch stream: every waiter's watch on its predecessor
//! and every hold's watch on its own key share it, told apart by watch id.
//!
//! A task owns the stream. A watch asked for is created on it (etcd answers
//! creations in the order they were sent, which names each one's id); its
//! key's deletions go to the watcher; dropping the watcher cancels it. When
//! the stream breaks, every watcher is told ([`Note::Broken`]) and looks
//! again (a waiter re-reads its predecessor, a hold its key); the next
//! watch opens a new stream.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use etcd_client::{Client, EventType, WatchFilterType, WatchOptions, WatchResponse};
use tokio::sync::{Notify, mpsc};

/// What a watcher hears.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Note {
    /// The watch is in place: a deletion from now on will be heard.
    Created,
    /// The key was deleted, at this revision.
    Deleted(i64),
    /// The watch ended without telling (the stream broke, or its start
    /// revision was compacted): look again.
    Broken,
}

enum Command {
    Watch {
        id: u64,
        key: Vec<u8>,
        from: i64,
        /// A watch on every key under `key` (a prefix) whose deletion is
        /// heard only for keys created before this revision.
        before: Option<i64>,
        sink: Arc<Notes>,
    },
    Cancel {
        id: u64,
    },
}

/// The handle to the client's watch task.
pub(crate) struct Watches {
    commands: mpsc::UnboundedSender<Command>,
    next: std::sync::atomic::AtomicU64,
}

/// One watch on one key's deletion; cancelled when dropped.
pub(crate) struct Watch {
    id: u64,
    notes: Arc<Notes>,
    commands: mpsc::UnboundedSender<Command>,
}

/// What a watch has heard so far, told to its one watcher. Not a channel:
/// a waiter at the head of a name's line keeps a watch for as long as it
/// waits, and a channel costs a kilobyte (its first block); this is a few
/// words.
pub(crate) struct Notes {
    heard: Mutex<Heard>,
    wake: Notify,
}

#[derive(Default)]
struct Heard {
    created: bool,
    /// `Created` was returned by [`Watch::next`].
    told_created: bool,
    deleted: Option<i64>,
    broken: bool,
}

impl Notes {
    fn new() -> Arc<Notes> {
        Arc::new(Notes {
            heard: Mutex::default(),
            wake: Notify::new(),
        })
    }

    /// Hears `note` (the watcher takes it at its next look).
    fn tell(&self, note: Note) {
        {
            let mut heard = self.heard.lock().unwrap_or_else(|p| p.into_inner());
            match note {
                Note::Created => heard.created = true,
                Note::Deleted(revision) => heard.deleted = heard.deleted.or(Some(revision)),
                Note::Broken => heard.broken = true,
            }
        }
        // One watcher: a wake-up with nobody waiting is kept for it.
        self.wake.notify_one();
    }

    /// The next note, in the order heard; a deletion outranks a break.
    /// A deletion is told once (those heard meanwhile are one note).
    fn take(&self) -> Option<Note> {
        let mut heard = self.heard.lock().unwrap_or_else(|p| p.into_inner());
        if heard.created && !heard.told_created {
            heard.told_created = true;
            return Some(Note::Created);
        }
        // Told once: a prefix's watcher waits for the next deletion after
        // it (a key's watcher looks no further than its key's).
        if let Some(revision) = heard.deleted.take() {
            return Some(Note::Deleted(revision));
        }
        heard.broken.then_some(Note::Broken)
    }
}

impl Watch {
    /// The next thing heard: the key's deletion, or that the watch broke.
    pub(crate) async fn next(&mut self) -> Note {
        loop {
            if let Some(note) = self.notes.take() {
                return note;
            }
            self.notes.wake.notified().await;
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Cancel { id: self.id });
    }
}

impl Watches {
    /// Starts the task (on the current runtime: the client's).
    pub(crate) fn start(client: Client) -> Watches {
        let (commands, inbox) = mpsc::unbounded_channel();
        tokio::spawn(run(client, inbox));
        Watches {
            commands,
            next: std::sync::atomic::AtomicU64::new(1),
        }
    }

    /// Watches `key` for its deletion at revision `from` or later (0: from
    /// now; such a watch is in step with etcd at once, while one from a
    /// past revision catches up in etcd's next sync round).
    pub(crate) fn watch(&self, key: &[u8], from: i64) -> Watch {
        self.open(key, from, None)
    }

    /// Watches, from now, every key under `prefix` for the deletion of one
    /// created before revision `before` (a permit's waiter: any key before
    /// its own).
    pub(crate) fn watch_before(&self, prefix: &[u8], before: i64) -> Watch {
        self.open(prefix, 0, Some(before))
    }

    fn open(&self, key: &[u8], from: i64, before: Option<i64>) -> Watch {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let notes = Notes::new();
        // The task is gone only with the client's runtime: then the
        // watcher hears `Broken` at once.
        let sent = self.commands.send(Command::Watch {
            id,
            key: key.to_owned(),
            from,
            before,
            sink: notes.clone(),
        });
        if sent.is_err() {
            notes.tell(Note::Broken);
        }
        Watch {
            id,
            notes,
            commands: self.commands.clone(),
        }
    }
}

/// The watch task's state.
#[derive(Default)]
struct Table {
    /// Watches sent, their creation not yet answered, in order.
    pending: VecDeque<u64>,
    /// etcd's watch id to ours.
    ids: HashMap<i64, u64>,
    /// Our watches: where their notes go, and etcd's id once created.
    sinks: HashMap<u64, (Arc<Notes>, Option<i64>)>,
    /// The watches on a prefix: the revision before which a deleted key
    /// must have been created to be heard.
    before: HashMap<u64, i64>,
}

impl Drop for Table {
    /// The task is gone (its runtime shut down): every watcher looks again.
    fn drop(&mut self) {
        for (sink, _) in self.sinks.values() {
            sink.tell(Note::Broken);
        }
    }
}

impl Table {
    /// The stream broke: every watcher looks again.
    fn broken(&mut self) {
        for (sink, _) in self.sinks.values() {
            sink.tell(Note::Broken);
        }
        self.sinks.clear();
        *self = Table::default();
    }

    /// Handles one answer; returns etcd ids to cancel (watches dropped
    /// before their creation was answered).
    fn answer(&mut self, answer: &WatchResponse) -> Option<i64> {
        let etcd_id = answer.watch_id();
        if answer.created() {
            let ours = self.pending.pop_front()?;
            match self.sinks.get_mut(&ours) {
                Some((sink, id)) => {
                    *id = Some(etcd_id);
                    sink.tell(Note::Created);
                    self.ids.insert(etcd_id, ours);
                }
                None => return Some(etcd_id),
            }
        }
        let ours = *self.ids.get(&etcd_id)?;
        if answer.canceled() {
            self.ids.remove(&etcd_id);
            self.before.remove(&ours);
            if let Some((sink, _)) = self.sinks.remove(&ours) {
                sink.tell(Note::Broken);
            }
            return None;
        }
        let before = self.before.get(&ours).copied();
        let deleted = answer
            .events()
            .iter()
            .filter(|e| e.event_type() == EventType::Delete)
            .filter(|e| {
                before.is_none_or(|before| {
                    e.prev_kv().is_some_and(|kv| kv.create_revision() < before)
                })
            })
            .find_map(|e| e.kv().map(|kv| kv.mod_revision()));
        if let Some(revision) = deleted
            && let Some((sink, _)) = self.sinks.get(&ours)
        {
            sink.tell(Note::Deleted(revision));
        }
        None
    }
}

/// What woke the watch task.
enum Woken {
    Command(Option<Command>),
    Answer(Result<Option<WatchResponse>, etcd_client::Error>),
}

async fn run(client: Client, mut inbox: mpsc::UnboundedReceiver<Command>) {
    let mut table = Table::default();
    let mut stream: Option<etcd_client::WatchStream> = None;
    loop {
        let woken = {
            let answer = async {
                match stream.as_mut() {
                    Some(stream) => stream.message().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                command = inbox.recv() => Woken::Command(command),
                answer = answer => Woken::Answer(answer),
            }
        };
        match woken {
            Woken::Command(None) => return,
            Woken::Command(Some(Command::Watch {
                id,
                key,
                from,
                before,
                sink,
            })) => {
                let options = WatchOptions::new().with_filters([WatchFilterType::NoPut]);
                let options = match before {
                    Some(_) => options.with_prefix().with_prev_key(),
                    None => options,
                };
                let options = match from {
                    0 => options,
                    from => options.with_start_revision(from),
                };
                let sent = match stream.as_mut() {
                    Some(stream) => stream.watch(key, Some(options)).await.is_ok(),
                    None => match client.watch_client().watch(key, Some(options)).await {
                        Ok(opened) => {
                            stream = Some(opened);
                            true
                        }
                        Err(_) => false,
                    },
                };
                if sent {
                    table.pending.push_back(id);
                    table.sinks.insert(id, (sink, None));
                    if let Some(before) = before {
                        table.before.insert(id, before);
                    }
                } else {
                    sink.tell(Note::Broken);
                    table.broken();
                    stream = None;
                }
            }
            Woken::Command(Some(Command::Cancel { id })) => {
                table.before.remove(&id);
                if let Some((_, Some(etcd_id))) = table.sinks.remove(&id) {
                    table.ids.remove(&etcd_id);
                    if let Some(stream) = stream.as_mut() {
                        let _ = stream.cancel(etcd_id).await;
                    }
                }
            }
            Woken::Answer(Ok(Some(answer))) => {
                if let Some(etcd_id) = table.answer(&answer)
                    && let Some(stream) = stream.as_mut()
                {
                    let _ = stream.cancel(etcd_id).await;
                }
            }
            Woken::Answer(_) => {
                table.broken();
                stream = None;
            }
        }
    }
}
