//! Start-up recovery: every segment left by the previous run is read up to its first torn frame
//! and checkpointed before the service serves. Must never start over a segment holding a whole
//! frame it cannot read (the records after it would be lost).

use std::{collections::HashMap, path::Path, sync::Arc};

use toolplane_store::fs::Fs;

use super::{
    RunKey,
    checkpoint::store_objects,
    files::Files,
    frame::{Frame, parse_segment, segment_name},
    io_err,
    journal::RunJournal,
    lock,
    shared::{ObjectRef, Shared, journal_in},
};
use crate::error::WsError;

/// Start-up: checkpoints one segment left by the previous run and deletes it.
pub(super) fn recover_segment(
    fs: &Arc<dyn Fs>,
    dir: &Path,
    n: u64,
    shared: &Shared,
    files: &Arc<Files>,
) -> Result<(), WsError> {
    let path = dir.join(segment_name(n));
    let data = fs
        .read(&path)
        .map_err(|e| io_err("read journal segment", &path, e))?;
    let mut objects = Vec::new();
    let mut touched: HashMap<RunKey, (Arc<RunJournal>, u64)> = HashMap::new();
    let mut sealed: Vec<Arc<RunJournal>> = Vec::new();
    let frames = parse_segment(&data).map_err(|e| {
        WsError::io(format!(
            "journal segment {}: {e}; it is kept and the service does not start rather than drop what follows",
            path.display()
        ))
    })?;
    for frame in frames {
        match frame {
            Frame::Object {
                key,
                path,
                put_at,
                bytes,
            } => objects.push(ObjectRef {
                key,
                path,
                bytes: Arc::new(bytes.to_vec()),
                put_at,
            }),
            Frame::Event { key, event } => {
                let journal = journal_in(shared, files, &key)?;
                let seq = event.seq;
                {
                    let mut state = lock(&journal.state);
                    if seq == state.last() + 1 {
                        state.tail.push_back(event);
                        state.next_claim = state.last() + 1;
                    } else if seq > state.last() + 1 {
                        tracing::error!(run = %key.1, seq, last = state.last(), "journal record after a gap ignored");
                        continue;
                    }
                }
                let last = journal.last_seq();
                touched.insert(key, (journal, last));
            }
            Frame::Seal { key } => {
                let journal = journal_in(shared, files, &key)?;
                journal.seal();
                sealed.push(journal);
            }
        }
    }
    store_objects(shared, files, &objects).map_err(|e| {
        WsError::io(format!(
            "restore the audit objects of segment {n} from the journal log: {e}"
        ))
    })?;
    for (journal, last) in touched.values() {
        journal.checkpoint(*last, false)?;
    }
    for journal in &sealed {
        journal.checkpoint(0, true)?;
    }
    for (journal, _) in touched.values() {
        journal.committed.send_replace(journal.last_seq());
    }
    fs.remove_file(&path)
        .map_err(|e| io_err("delete journal segment", &path, e))?;
    fs.sync_dir(dir)
        .map_err(|e| io_err("sync journal directory", dir, e))
}
