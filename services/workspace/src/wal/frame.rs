//! The log's byte formats: frames (`[u32 body length][first 8 bytes of sha256(body)][body]`),
//! the segment frames (audit object, journal record, seal), the object pack frames and the file
//! names of segments, journal files and packs. Pure: no IO, no state; must never change a format
//! that a segment, journal file or pack already on disk holds.

use prost::Message;
use sha2::{Digest, Sha256};
use toolplane_proto::v1::JournalEvent;

use super::{RunKey, shared::ObjectRef};
use crate::engine::now_ms;

/// An audit object without its put time (segments written before put times were logged).
pub(super) const KIND_OBJECT_UNTIMED: u8 = 1;
pub(super) const KIND_EVENT: u8 = 2;
pub(super) const KIND_SEAL: u8 = 3;
/// An audit object with the time it was put.
pub(super) const KIND_OBJECT: u8 = 4;

pub(super) fn put_str(buf: &mut Vec<u8>, s: &[u8]) {
    buf.extend_from_slice(&(s.len() as u32).to_le_bytes());
    buf.extend_from_slice(s);
}

/// Appends a frame whose body `body` writes to `out`, in place (no intermediate buffer).
pub(super) fn push_frame(out: &mut Vec<u8>, body: impl FnOnce(&mut Vec<u8>)) {
    let at = out.len();
    out.extend_from_slice(&[0; 12]);
    body(out);
    let len = (out.len() - at - 12) as u32;
    let sum = Sha256::digest(&out[at + 12..]);
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
    out[at + 4..at + 12].copy_from_slice(&sum[..8]);
}

pub(super) fn object_frame(out: &mut Vec<u8>, o: &ObjectRef) {
    push_frame(out, |b| {
        b.push(KIND_OBJECT);
        put_str(b, o.key.0.as_bytes());
        put_str(b, o.key.1.as_bytes());
        put_str(b, o.path.as_bytes());
        b.extend_from_slice(&o.put_at.to_le_bytes());
        put_str(b, &o.bytes);
    });
}

pub(super) fn event_frame(out: &mut Vec<u8>, key: &RunKey, event: &JournalEvent) {
    push_frame(out, |b| {
        b.push(KIND_EVENT);
        put_str(b, key.0.as_bytes());
        put_str(b, key.1.as_bytes());
        b.extend_from_slice(&event.seq.to_le_bytes());
        b.extend_from_slice(&(event.encoded_len() as u32).to_le_bytes());
        // Encoding into a Vec cannot run out of space.
        let _ = event.encode(b);
    });
}

pub(super) fn seal_frame(out: &mut Vec<u8>, key: &RunKey) {
    push_frame(out, |b| {
        b.push(KIND_SEAL);
        put_str(b, key.0.as_bytes());
        put_str(b, key.1.as_bytes());
    });
}

pub(super) struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take(8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn string(&mut self) -> Option<String> {
        self.bytes()
            .and_then(|b| String::from_utf8(b.to_vec()).ok())
    }
}

/// The bodies of the intact frames of `data`, up to the first torn or corrupt one.
pub(super) fn frame_bodies(data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    while let Some((body, len)) = frame_body(rest) {
        out.push(body);
        rest = rest.get(len..).unwrap_or_default();
    }
    out
}

/// The body of the intact frame at the start of `data`, and the frame's whole length.
pub(super) fn frame_body(data: &[u8]) -> Option<(&[u8], usize)> {
    let mut cur = Cursor(data);
    let len = cur.u32()? as usize;
    let sum = cur.take(8)?;
    let body = cur.take(len)?;
    (Sha256::digest(body)[..8] == *sum).then_some((body, 12 + len))
}

pub(super) enum Frame<'a> {
    Object {
        key: RunKey,
        path: String,
        put_at: i64,
        bytes: &'a [u8],
    },
    Event {
        key: RunKey,
        event: JournalEvent,
    },
    Seal {
        key: RunKey,
    },
}

/// The intact frames of a segment, up to the first torn or corrupt one. A frame whose checksum
/// holds but whose body cannot be read (another version's frame, or a bug) is an error: the
/// records after it are not silently dropped.
pub(super) fn parse_segment(data: &[u8]) -> Result<Vec<Frame<'_>>, String> {
    let mut out = Vec::new();
    for (i, body) in frame_bodies(data).into_iter().enumerate() {
        let mut b = Cursor(body);
        let parsed = (|| {
            let kind = b.take(1)?[0];
            let key = (b.string()?, b.string()?);
            match kind {
                KIND_OBJECT => Some(Frame::Object {
                    key,
                    path: b.string()?,
                    put_at: b.u64()? as i64,
                    bytes: b.bytes()?,
                }),
                KIND_OBJECT_UNTIMED => Some(Frame::Object {
                    key,
                    path: b.string()?,
                    put_at: now_ms(),
                    bytes: b.bytes()?,
                }),
                KIND_EVENT => {
                    let _seq = b.u64()?;
                    let event = JournalEvent::decode(b.bytes()?).ok()?;
                    Some(Frame::Event { key, event })
                }
                KIND_SEAL => Some(Frame::Seal { key }),
                _ => None,
            }
        })();
        match parsed {
            Some(f) => out.push(f),
            None => {
                return Err(format!(
                    "frame {i} is whole but cannot be read (kind {})",
                    body.first().copied().unwrap_or(0)
                ));
            }
        }
    }
    Ok(out)
}

pub(super) fn segment_name(n: u64) -> String {
    format!("seg-{n:010}.wal")
}

pub(super) fn journal_file_name(first: u64, last: u64) -> String {
    format!("{first:020}-{last:020}.jrn")
}

pub(super) fn parse_journal_file_name(name: &str) -> Option<(u64, u64)> {
    let (first, last) = name.strip_suffix(".jrn")?.split_once('-')?;
    Some((first.parse().ok()?, last.parse().ok()?))
}

pub(super) fn pack_name(n: u64) -> String {
    format!("objects-{n:010}.pack")
}

pub(super) fn parse_pack_name(name: &str) -> Option<u64> {
    name.strip_prefix("objects-")?
        .strip_suffix(".pack")?
        .parse()
        .ok()
}

/// The first 16 bytes of the sha256 of `bytes`.
pub(super) fn digest16(bytes: &[u8]) -> [u8; 16] {
    let sum = Sha256::digest(bytes);
    let mut out = [0; 16];
    out.copy_from_slice(&sum[..16]);
    out
}

/// A pack frame's body: the object's path, when it was put, the digest of its bytes (so an index
/// is built without hashing), its bytes.
pub(super) fn parse_pack_body(body: &[u8]) -> Option<(String, i64, [u8; 16], &[u8])> {
    let mut b = Cursor(body);
    let path = b.string()?;
    let put_at = b.u64()? as i64;
    let digest = b.take(16)?.try_into().ok()?;
    Some((path, put_at, digest, b.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> RunKey {
        ("default".to_owned(), "r1".to_owned())
    }

    #[test]
    fn segments_with_untimed_object_frames_still_parse() {
        // An object frame as segments held it before put times were logged, then a record.
        let mut data = Vec::new();
        push_frame(&mut data, |b| {
            b.push(KIND_OBJECT_UNTIMED);
            put_str(b, b"default");
            put_str(b, b"r1");
            put_str(b, b"tool-args/i/call_0000000000000001.json");
            put_str(b, b"{}");
        });
        let event = JournalEvent {
            seq: 1,
            r#type: "tool_call_requested".into(),
            ..Default::default()
        };
        event_frame(&mut data, &key(), &event);
        let frames = parse_segment(&data).unwrap();
        assert_eq!(frames.len(), 2);
        assert!(
            matches!(&frames[0], Frame::Object { path, bytes, .. } if path == "tool-args/i/call_0000000000000001.json" && *bytes == b"{}")
        );
        assert!(matches!(&frames[1], Frame::Event { event: e, .. } if e.seq == 1));
    }

    #[test]
    fn a_whole_frame_that_cannot_be_read_is_an_error_not_a_torn_tail() {
        let mut data = Vec::new();
        seal_frame(&mut data, &key());
        push_frame(&mut data, |b| {
            b.push(9);
            put_str(b, b"default");
            put_str(b, b"r1");
        });
        match parse_segment(&data) {
            Err(e) => assert!(e.contains("frame 1"), "{e}"),
            Ok(frames) => panic!("{} frames parsed", frames.len()),
        }
        // A torn tail is not an error: the frames before it are the segment.
        let mut torn = Vec::new();
        seal_frame(&mut torn, &key());
        torn.extend_from_slice(&[7, 0, 0, 0, 1, 2]);
        assert_eq!(parse_segment(&torn).unwrap().len(), 1);
    }
}
