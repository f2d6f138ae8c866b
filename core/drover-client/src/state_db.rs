//! The agent's own state on disk (Nomad's client state DB), in a redb file at
//! `<data_dir>/client/state.redb`, so a restarted agent can find its allocations and reattach to
//! the tasks they run.
//!
//! Values are opaque bytes: the caller chooses the encoding. Every write is committed with
//! immediate durability (fsynced before the call returns), because losing a task handle means
//! losing track of a running process; the writes many tasks make at once (task handles,
//! removals) share their commits ([`group_commit`]). All calls block on disk IO; call them from
//! `tokio::task::spawn_blocking` when on an async runtime.

mod group_commit;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};

use group_commit::{GroupCommit, commit_one};

/// Allocation id -> the allocation as the caller serialised it.
const ALLOCS: TableDefinition<&str, &[u8]> = TableDefinition::new("allocs");
/// (allocation id, task name) -> the driver's task handle as the caller serialised it.
const TASK_HANDLES: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("task_handles");
/// Agent metadata such as the node id and secret.
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
/// What the client last reported per allocation (task states): small, rewritten often, so kept
/// apart from the allocation itself, which carries its whole job and is written once.
const ALLOC_STATUS: TableDefinition<&str, &[u8]> = TableDefinition::new("alloc_status");

/// redb's page cache for the state file. redb's default (1 GiB) keeps every page written
/// since the agent started, so the agent grew with each allocation it ever ran; the file is
/// read back only when the agent restarts.
const CACHE_BYTES: usize = 4 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum StateDbError {
    #[error("cannot create directory {path} for the client state: {source}")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("client state {path}: cannot {op}: {source}")]
    Db {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: Box<redb::Error>,
    },
}

/// Handle on the client state file. Cheap to clone; clones share one open database.
#[derive(Clone)]
pub struct ClientStateDb {
    db: Arc<Database>,
    group: Arc<GroupCommit>,
    path: PathBuf,
}

impl std::fmt::Debug for ClientStateDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientStateDb")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl ClientStateDb {
    /// Where the state file lives inside an agent data dir.
    pub fn default_path(data_dir: &Path) -> PathBuf {
        data_dir.join("client").join("state.redb")
    }

    /// Opens the state file, creating it and its directory if needed.
    pub fn open(path: &Path) -> Result<Self, StateDbError> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|source| StateDbError::CreateDir {
                path: parent.to_path_buf(),
                source,
            })?;
        }
        let db = Database::builder()
            .set_cache_size(CACHE_BYTES)
            .create(path)
            .map_err(|source| StateDbError::Db {
                path: path.to_path_buf(),
                op: "open",
                source: Box::new(source.into()),
            })?;
        let state = Self {
            db: Arc::new(db),
            group: Arc::default(),
            path: path.to_path_buf(),
        };
        // Create every table up front so that reads never meet a missing table.
        state.write("create tables", |txn| {
            txn.open_table(ALLOCS)?;
            txn.open_table(TASK_HANDLES)?;
            txn.open_table(META)?;
            txn.open_table(ALLOC_STATUS)?;
            Ok(())
        })?;
        Ok(state)
    }

    /// The file this handle reads and writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stores (or replaces) one allocation.
    pub fn put_alloc(&self, alloc_id: &str, value: &[u8]) -> Result<(), StateDbError> {
        self.put_allocs(&[(alloc_id, value)])
    }

    /// Stores several allocations in one transaction.
    pub fn put_allocs(&self, allocs: &[(&str, &[u8])]) -> Result<(), StateDbError> {
        self.write("put allocation", |txn| {
            let mut table = txn.open_table(ALLOCS)?;
            for (alloc_id, value) in allocs {
                table.insert(*alloc_id, *value)?;
            }
            Ok(())
        })
    }

    /// One allocation, if stored.
    pub fn get_alloc(&self, alloc_id: &str) -> Result<Option<Vec<u8>>, StateDbError> {
        self.read("get allocation", |txn| {
            let table = txn.open_table(ALLOCS)?;
            Ok(table.get(alloc_id)?.map(|value| value.value().to_vec()))
        })
    }

    /// Every stored allocation, ordered by id.
    pub fn all_allocs(&self) -> Result<Vec<(String, Vec<u8>)>, StateDbError> {
        self.read("list allocations", |txn| {
            let table = txn.open_table(ALLOCS)?;
            table
                .iter()?
                .map(|entry| {
                    let (key, value) = entry?;
                    Ok((key.value().to_string(), value.value().to_vec()))
                })
                .collect()
        })
    }

    /// Saves the latest status of several allocations in one transaction.
    pub fn put_alloc_statuses(&self, statuses: &[(&str, &[u8])]) -> Result<(), StateDbError> {
        self.write("put allocation status", |txn| {
            let mut table = txn.open_table(ALLOC_STATUS)?;
            for (alloc_id, value) in statuses {
                table.insert(*alloc_id, *value)?;
            }
            Ok(())
        })
    }

    pub fn get_alloc_status(&self, alloc_id: &str) -> Result<Option<Vec<u8>>, StateDbError> {
        self.read("get allocation status", |txn| {
            let table = txn.open_table(ALLOC_STATUS)?;
            Ok(table.get(alloc_id)?.map(|value| value.value().to_vec()))
        })
    }

    /// Removes an allocation together with all of its task handles, in one transaction, so a
    /// crash can never leave handles of an allocation that is gone.
    pub fn delete_alloc(&self, alloc_id: &str) -> Result<(), StateDbError> {
        let alloc_id = alloc_id.to_string();
        self.write_grouped(
            "delete allocation",
            Box::new(move |txn| {
                txn.open_table(ALLOC_STATUS)?.remove(alloc_id.as_str())?;
                txn.open_table(ALLOCS)?.remove(alloc_id.as_str())?;
                remove_task_handles(txn, &alloc_id)
            }),
        )
    }

    /// Stores (or replaces) the handle of one task.
    pub fn put_task_handle(
        &self,
        alloc_id: &str,
        task: &str,
        value: &[u8],
    ) -> Result<(), StateDbError> {
        let (alloc_id, task, value) = (alloc_id.to_string(), task.to_string(), value.to_vec());
        self.write_grouped(
            "put task handle",
            Box::new(move |txn| {
                txn.open_table(TASK_HANDLES)?
                    .insert((alloc_id.as_str(), task.as_str()), value.as_slice())?;
                Ok(())
            }),
        )
    }

    /// The handles of one allocation's tasks, ordered by task name.
    pub fn task_handles(&self, alloc_id: &str) -> Result<Vec<(String, Vec<u8>)>, StateDbError> {
        self.read("list task handles", |txn| {
            let table = txn.open_table(TASK_HANDLES)?;
            let mut handles = Vec::new();
            for entry in table.range((alloc_id, "")..)? {
                let (key, value) = entry?;
                let (key_alloc, task) = key.value();
                if key_alloc != alloc_id {
                    break;
                }
                handles.push((task.to_string(), value.value().to_vec()));
            }
            Ok(handles)
        })
    }

    /// Removes the handle of one task.
    pub fn delete_task_handle(&self, alloc_id: &str, task: &str) -> Result<(), StateDbError> {
        self.write("delete task handle", |txn| {
            txn.open_table(TASK_HANDLES)?.remove((alloc_id, task))?;
            Ok(())
        })
    }

    /// Removes the handles of all of one allocation's tasks.
    pub fn delete_task_handles(&self, alloc_id: &str) -> Result<(), StateDbError> {
        self.write("delete task handles", |txn| {
            remove_task_handles(txn, alloc_id)
        })
    }

    /// Stores (or replaces) one metadata value, such as the node id or secret.
    pub fn put_meta(&self, key: &str, value: &[u8]) -> Result<(), StateDbError> {
        self.write("put metadata", |txn| {
            txn.open_table(META)?.insert(key, value)?;
            Ok(())
        })
    }

    /// One metadata value, if stored.
    pub fn get_meta(&self, key: &str) -> Result<Option<Vec<u8>>, StateDbError> {
        self.read("get metadata", |txn| {
            let table = txn.open_table(META)?;
            Ok(table.get(key)?.map(|value| value.value().to_vec()))
        })
    }

    fn write(
        &self,
        op: &'static str,
        body: impl Fn(&WriteTransaction) -> Result<(), redb::Error>,
    ) -> Result<(), StateDbError> {
        commit_one(&self.db, &body).map_err(|source| self.error(op, source))
    }

    /// As [`Self::write`], sharing the commit with the other writers waiting at the same time.
    fn write_grouped(
        &self,
        op: &'static str,
        body: group_commit::Body,
    ) -> Result<(), StateDbError> {
        self.group
            .write(&self.db, body)
            .map_err(|source| self.error(op, source))
    }

    fn read<T>(
        &self,
        op: &'static str,
        body: impl FnOnce(&redb::ReadTransaction) -> Result<T, redb::Error>,
    ) -> Result<T, StateDbError> {
        let run = || -> Result<T, redb::Error> {
            let txn = self.db.begin_read()?;
            body(&txn)
        };
        run().map_err(|source| self.error(op, source))
    }

    fn error(&self, op: &'static str, source: redb::Error) -> StateDbError {
        StateDbError::Db {
            path: self.path.clone(),
            op,
            source: Box::new(source),
        }
    }
}

fn remove_task_handles(txn: &WriteTransaction, alloc_id: &str) -> Result<(), redb::Error> {
    let mut table = txn.open_table(TASK_HANDLES)?;
    let mut tasks = Vec::new();
    for entry in table.range((alloc_id, "")..)? {
        let (key, _) = entry?;
        let (key_alloc, task) = key.value();
        if key_alloc != alloc_id {
            break;
        }
        tasks.push(task.to_string());
    }
    for task in &tasks {
        table.remove((alloc_id, task.as_str()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> Self {
            let path =
                std::env::temp_dir().join(format!("drover-statedb-{}", uuid::Uuid::new_v4()));
            Self(path)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn open() -> (TempDir, ClientStateDb) {
        let tmp = TempDir::new();
        let db = ClientStateDb::open(&ClientStateDb::default_path(&tmp.0)).expect("open");
        (tmp, db)
    }

    #[test]
    fn open_creates_the_file_under_client_dir() {
        let (tmp, db) = open();
        assert_eq!(db.path(), tmp.0.join("client/state.redb"));
        assert!(db.path().exists());
        assert!(db.all_allocs().expect("list").is_empty());
        assert_eq!(db.get_meta("node_id").expect("meta"), None);
    }

    #[test]
    fn allocs_are_stored_replaced_listed_and_deleted() {
        let (_tmp, db) = open();
        db.put_alloc("b", b"two").expect("put");
        db.put_allocs(&[("a", b"one"), ("c", b"three")])
            .expect("batch");
        db.put_alloc("b", b"TWO").expect("replace");
        assert_eq!(
            db.all_allocs().expect("list"),
            vec![
                ("a".to_string(), b"one".to_vec()),
                ("b".to_string(), b"TWO".to_vec()),
                ("c".to_string(), b"three".to_vec()),
            ]
        );
        assert_eq!(db.get_alloc("b").expect("get"), Some(b"TWO".to_vec()));
        db.delete_alloc("b").expect("delete");
        db.delete_alloc("never-there")
            .expect("deleting a missing alloc is fine");
        let ids: Vec<String> = db
            .all_allocs()
            .expect("list")
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert_eq!(ids, vec!["a", "c"]);
    }

    #[test]
    fn task_handles_are_scoped_to_their_alloc_even_with_prefix_ids() {
        let (_tmp, db) = open();
        db.put_task_handle("a", "web", b"h1").expect("put");
        db.put_task_handle("a", "db", b"h2").expect("put");
        db.put_task_handle("ab", "web", b"other").expect("put");
        db.put_task_handle("", "x", b"empty id").expect("put");
        assert_eq!(
            db.task_handles("a").expect("list"),
            vec![
                ("db".to_string(), b"h2".to_vec()),
                ("web".to_string(), b"h1".to_vec()),
            ]
        );
        db.delete_task_handle("a", "db").expect("delete one");
        assert_eq!(db.task_handles("a").expect("list").len(), 1);
        db.delete_task_handles("a").expect("delete all");
        assert!(db.task_handles("a").expect("list").is_empty());
        assert_eq!(db.task_handles("ab").expect("list").len(), 1);
        assert_eq!(db.task_handles("").expect("list").len(), 1);
    }

    #[test]
    fn deleting_an_alloc_deletes_its_task_handles() {
        let (_tmp, db) = open();
        db.put_alloc("a", b"alloc").expect("put");
        db.put_task_handle("a", "web", b"h").expect("put");
        db.put_task_handle("b", "web", b"keep").expect("put");
        db.delete_alloc("a").expect("delete");
        assert!(db.task_handles("a").expect("list").is_empty());
        assert_eq!(db.task_handles("b").expect("list").len(), 1);
    }

    #[test]
    fn state_survives_reopening() {
        let tmp = TempDir::new();
        let path = ClientStateDb::default_path(&tmp.0);
        {
            let db = ClientStateDb::open(&path).expect("open");
            db.put_meta("node_id", b"n-1").expect("meta");
            db.put_alloc("a", b"alloc").expect("alloc");
            db.put_task_handle("a", "web", b"pid=42").expect("handle");
        }
        let db = ClientStateDb::open(&path).expect("reopen");
        assert_eq!(db.get_meta("node_id").expect("meta"), Some(b"n-1".to_vec()));
        assert_eq!(db.all_allocs().expect("list").len(), 1);
        assert_eq!(
            db.task_handles("a").expect("list"),
            vec![("web".to_string(), b"pid=42".to_vec())]
        );
    }

    #[test]
    fn clones_share_one_database_across_threads() {
        let (_tmp, db) = open();
        let writers: Vec<_> = (0..4)
            .map(|i| {
                let db = db.clone();
                std::thread::spawn(move || db.put_alloc(&format!("alloc-{i}"), b"x"))
            })
            .collect();
        for writer in writers {
            writer.join().expect("thread").expect("put");
        }
        assert_eq!(db.all_allocs().expect("list").len(), 4);
    }
}
