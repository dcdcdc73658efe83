//! The byte formats of a run's journal on a shared store: the head record (the fence, the next
//! sequence number, the seal, the segments already moved out and the tail of encoded records),
//! a segment (length-prefixed encoded records) and an audit object (its put time, then its
//! bytes). Pure: no IO. Must never decode a record from bytes that fail a length check, nor encode
//! one committed list of records into two different segments.

use prost::Message;
use toolplane_proto::v1::JournalEvent;

use crate::error::WsError;

const HEAD_MAGIC: &[u8; 6] = b"TPLH1\n";
const SEGMENT_MAGIC: &[u8; 6] = b"TPLS1\n";

/// A run's journal head, as stored at `heads/<cell>/<run>`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Head {
    /// The fence: appends of an older epoch are refused.
    pub epoch: u64,
    /// The sequence number the next append must name.
    pub next_seq: u64,
    pub sealed: bool,
    /// Segments already written, `(first, last)`, contiguous from 1.
    pub segments: Vec<(u64, u64)>,
    /// Encoded records after the last segment, in sequence order.
    pub tail: Vec<Vec<u8>>,
}

impl Head {
    /// The head of a journal nobody wrote yet.
    pub fn empty() -> Head {
        Head {
            next_seq: 1,
            ..Head::default()
        }
    }

    /// The sequence number of the tail's first record.
    pub fn tail_first(&self) -> u64 {
        self.next_seq - self.tail.len() as u64
    }

    pub fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }

    pub fn tail_bytes(&self) -> usize {
        self.tail.iter().map(|r| r.len() + 4).sum()
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.segments.len() * 16 + self.tail_bytes());
        out.extend_from_slice(HEAD_MAGIC);
        out.extend_from_slice(&self.epoch.to_be_bytes());
        out.extend_from_slice(&self.next_seq.to_be_bytes());
        out.push(u8::from(self.sealed));
        out.extend_from_slice(&(self.segments.len() as u64).to_be_bytes());
        for (first, last) in &self.segments {
            out.extend_from_slice(&first.to_be_bytes());
            out.extend_from_slice(&last.to_be_bytes());
        }
        put_records(&mut out, &self.tail);
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Head, WsError> {
        let mut r = Reader::new(bytes, HEAD_MAGIC, "journal head")?;
        let epoch = r.u64()?;
        let next_seq = r.u64()?;
        let sealed = r.take(1)?[0] == 1;
        let n = r.count(16)?;
        let mut segments = Vec::with_capacity(n);
        for _ in 0..n {
            segments.push((r.u64()?, r.u64()?));
        }
        let tail = r.records()?;
        if next_seq == 0 || (tail.len() as u64) >= next_seq {
            return Err(corrupt(
                "journal head",
                "its tail is longer than its journal",
            ));
        }
        Ok(Head {
            epoch,
            next_seq,
            sealed,
            segments,
            tail,
        })
    }
}

/// The bytes of a segment holding `records` (already encoded): a function of the records alone,
/// so two writers moving the same committed records out write the same object.
pub fn encode_segment(records: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + records.iter().map(|r| r.len() + 4).sum::<usize>());
    out.extend_from_slice(SEGMENT_MAGIC);
    put_records(&mut out, records);
    out
}

/// The records of a segment, decoded.
pub fn decode_segment(bytes: &[u8]) -> Result<Vec<JournalEvent>, WsError> {
    let mut r = Reader::new(bytes, SEGMENT_MAGIC, "journal segment")?;
    r.records()?.iter().map(|b| decode_record(b)).collect()
}

pub fn decode_record(bytes: &[u8]) -> Result<JournalEvent, WsError> {
    JournalEvent::decode(bytes).map_err(|e| corrupt("journal record", &e.to_string()))
}

/// An audit object as stored: its put time (Unix ms), then its bytes.
pub fn encode_object(put_at_unix_ms: i64, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + bytes.len());
    out.extend_from_slice(&put_at_unix_ms.to_be_bytes());
    out.extend_from_slice(bytes);
    out
}

/// `(put time, bytes)` of a stored audit object.
pub fn decode_object(stored: &[u8]) -> Result<(i64, &[u8]), WsError> {
    if stored.len() < 8 {
        return Err(corrupt("audit object", "shorter than its header"));
    }
    let (time, bytes) = stored.split_at(8);
    let mut t = [0u8; 8];
    t.copy_from_slice(time);
    Ok((i64::from_be_bytes(t), bytes))
}

fn put_records(out: &mut Vec<u8>, records: &[Vec<u8>]) {
    out.extend_from_slice(&(records.len() as u64).to_be_bytes());
    for r in records {
        out.extend_from_slice(&(r.len() as u32).to_be_bytes());
        out.extend_from_slice(r);
    }
}

fn corrupt(what: &str, why: &str) -> WsError {
    WsError::io(format!("corrupt {what} in the store: {why}"))
}

/// Reads a stored record's fields, every length checked against what is left before use.
struct Reader<'a> {
    bytes: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8], magic: &[u8], what: &'static str) -> Result<Reader<'a>, WsError> {
        match bytes.strip_prefix(magic) {
            Some(bytes) => Ok(Reader { bytes, what }),
            None => Err(corrupt(what, "unknown format")),
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], WsError> {
        if self.bytes.len() < n {
            return Err(corrupt(self.what, "truncated"));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn u64(&mut self) -> Result<u64, WsError> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_be_bytes(b))
    }

    /// A count of items of at least `min_size` bytes each, refused when the rest cannot hold them.
    fn count(&mut self, min_size: usize) -> Result<usize, WsError> {
        let n = usize::try_from(self.u64()?).unwrap_or(usize::MAX);
        if n > self.bytes.len() / min_size.max(1) {
            return Err(corrupt(self.what, "a count larger than its bytes"));
        }
        Ok(n)
    }

    fn records(&mut self) -> Result<Vec<Vec<u8>>, WsError> {
        let n = self.count(4)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let mut len = [0u8; 4];
            len.copy_from_slice(self.take(4)?);
            let len = u32::from_be_bytes(len) as usize;
            out.push(self.take(len)?.to_vec());
        }
        if !self.bytes.is_empty() {
            return Err(corrupt(self.what, "bytes after its last record"));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_round_trips_and_a_cut_one_is_refused() {
        let head = Head {
            epoch: 7,
            next_seq: 6,
            sealed: true,
            segments: vec![(1, 3)],
            tail: vec![b"a".to_vec(), b"bc".to_vec()],
        };
        let bytes = head.encode();
        assert_eq!(Head::decode(&bytes).unwrap(), head);
        assert_eq!(head.tail_first(), 4);
        for cut in 0..bytes.len() {
            assert!(Head::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn a_segment_is_a_function_of_its_records() {
        let records = vec![
            JournalEvent {
                seq: 1,
                r#type: "a".into(),
                ..Default::default()
            }
            .encode_to_vec(),
        ];
        assert_eq!(encode_segment(&records), encode_segment(&records.clone()));
        let decoded = decode_segment(&encode_segment(&records)).unwrap();
        assert_eq!(decoded[0].seq, 1);
        assert!(decode_segment(b"TPLS1\n\xff\xff\xff\xff\xff\xff\xff\xff").is_err());
    }

    #[test]
    fn an_object_keeps_its_put_time_and_bytes() {
        let stored = encode_object(42, b"xyz");
        assert_eq!(decode_object(&stored).unwrap(), (42, &b"xyz"[..]));
        assert!(decode_object(b"short").is_err());
    }
}
