//! The ports' types to and from the peers' messages: catalog listings, journal records as stored,
//! tool contexts and executor answers, and gRPC statuses as port errors.

use serde_json::Value;
use toolplane_core::id::ToolId;
use toolplane_core::invocation::ToolInvocation;
use toolplane_proto::v1 as pb;

use super::{journal_event_pb, listing_to_entry, result_from_pb};
use crate::context::ports::{
    Executed, ListedTool, Outcome, PortError, PortErrorKind, StoredLevel, StoredProfile,
    StoredRecord, ToolContext,
};
use crate::state::JournalAppend;

/// A peer's status as a port error: its class, and its message (which starts with the peer's
/// stable code when it has one).
pub fn port_error(status: &tonic::Status) -> PortError {
    use tonic::Code;
    let kind = match status.code() {
        // A request a broken connection cut short: the peer went away.
        _ if lost(status) => PortErrorKind::Unavailable,
        Code::NotFound => PortErrorKind::NotFound,
        Code::InvalidArgument => PortErrorKind::InvalidArgument,
        Code::FailedPrecondition => PortErrorKind::FailedPrecondition,
        Code::AlreadyExists => PortErrorKind::AlreadyExists,
        Code::Unavailable => PortErrorKind::Unavailable,
        Code::Cancelled => PortErrorKind::Cancelled,
        Code::DeadlineExceeded => PortErrorKind::DeadlineExceeded,
        Code::Internal
        | Code::Unknown
        | Code::DataLoss
        | Code::Unauthenticated
        | Code::PermissionDenied => PortErrorKind::Broken,
        _ => PortErrorKind::Other,
    };
    let mut error = PortError::new(kind, status.message());
    error.details = toolplane_proto::status::raw_details(status).map(Into::into);
    error
}

/// Whether `status` says the request may not have reached a live replica: `UNAVAILABLE`, or a
/// status this side made from a broken connection (it carries the transport's error as its
/// source: `UNKNOWN` "transport error", `CANCELLED` "operation was canceled" when the connection
/// closed under a request in flight, `INTERNAL` for an HTTP/2 protocol error). A status the
/// workspace sent never has a source.
pub fn lost(status: &tonic::Status) -> bool {
    use std::error::Error;
    status.code() == tonic::Code::Unavailable
        || (matches!(
            status.code(),
            tonic::Code::Unknown | tonic::Code::Cancelled | tonic::Code::Internal
        ) && status.source().is_some())
}

/// A port error relayed to a host as a status: the peer's message, and its details as they were
/// (for a peer status without details, the code its message starts with, or
/// `runtime.dependency_unavailable`).
pub fn port_status(e: PortError) -> tonic::Status {
    let code = match e.kind {
        PortErrorKind::NotFound => tonic::Code::NotFound,
        PortErrorKind::InvalidArgument => tonic::Code::InvalidArgument,
        PortErrorKind::FailedPrecondition => tonic::Code::FailedPrecondition,
        PortErrorKind::AlreadyExists => tonic::Code::AlreadyExists,
        PortErrorKind::Unavailable => tonic::Code::Unavailable,
        PortErrorKind::Cancelled => tonic::Code::Cancelled,
        PortErrorKind::DeadlineExceeded => tonic::Code::DeadlineExceeded,
        PortErrorKind::Broken => tonic::Code::Internal,
        PortErrorKind::Other => tonic::Code::Unknown,
    };
    match &e.details {
        Some(raw) => toolplane_proto::status::relay(code, e.message, raw),
        None => {
            let reason = e
                .code()
                .unwrap_or(toolplane_core::error::RUNTIME_DEPENDENCY_UNAVAILABLE.as_str());
            let details = toolplane_proto::status::Details::new().meta("service", "runtime");
            toolplane_proto::status::status(code, reason, &e.message, details)
        }
    }
}

pub fn stored_profile(p: Option<pb::Profile>) -> StoredProfile {
    let p = p.unwrap_or_default();
    StoredProfile {
        profile_json: p.profile_json,
        version: p.version,
    }
}

/// A catalog listing with what its registration declared (id, category, progress-awareness).
pub fn listed_tool(listing: pb::ToolListing) -> ListedTool {
    let id = listing
        .descriptor
        .as_ref()
        .and_then(|d| ToolId::parse(&d.id).ok());
    let category = match pb::ToolCategory::try_from(listing.category)
        .unwrap_or(pb::ToolCategory::Unspecified)
    {
        pb::ToolCategory::Exploration => Some(toolplane_core::Category::Exploration),
        pb::ToolCategory::Action => Some(toolplane_core::Category::Action),
        pb::ToolCategory::Unspecified => None,
    };
    ListedTool {
        id,
        category,
        progress_aware: listing.progress_aware,
        entry: listing_to_entry(listing),
    }
}

pub fn stored_record(e: pb::JournalEvent) -> StoredRecord {
    let level = match pb::JournalLevel::try_from(e.level).unwrap_or(pb::JournalLevel::Unspecified) {
        pb::JournalLevel::Unspecified => StoredLevel::Unspecified,
        pb::JournalLevel::Debug => StoredLevel::Debug,
        pb::JournalLevel::Info => StoredLevel::Info,
        pb::JournalLevel::Warn => StoredLevel::Warn,
        pb::JournalLevel::Error => StoredLevel::Error,
    };
    let scope = e.scope.unwrap_or_default();
    StoredRecord {
        seq: e.seq,
        id: e.id,
        run_id: e.run_id,
        timestamp_ms: e.timestamp_unix_ms,
        level,
        kind: e.r#type,
        payload_json: e.payload_json,
        caused_by: e.causality.map(|c| c.caused_by),
        invocation_id: scope.invocation_id,
        related: scope.related_invocation_ids,
    }
}

pub fn stored_record_pb(r: StoredRecord) -> pb::JournalEvent {
    pb::JournalEvent {
        seq: r.seq,
        id: r.id,
        run_id: r.run_id,
        timestamp_unix_ms: r.timestamp_ms,
        level: (match r.level {
            StoredLevel::Unspecified => pb::JournalLevel::Unspecified,
            StoredLevel::Debug => pb::JournalLevel::Debug,
            StoredLevel::Info => pb::JournalLevel::Info,
            StoredLevel::Warn => pb::JournalLevel::Warn,
            StoredLevel::Error => pb::JournalLevel::Error,
        }) as i32,
        r#type: r.kind,
        payload_json: r.payload_json,
        causality: r.caused_by.map(|c| pb::JournalCausality { caused_by: c }),
        scope: Some(pb::JournalScope {
            invocation_id: r.invocation_id,
            related_invocation_ids: r.related,
        }),
        // The workspace stamps each stored record with its append's epoch.
        epoch: 0,
    }
}

pub fn tool_context_pb(c: ToolContext) -> pb::ToolContext {
    pb::ToolContext {
        cell_id: c.cell_id,
        actor_id: c.actor_id,
        run_id: c.run_id,
        session_id: c.session_id,
        invocation_id: c.invocation_id,
        agent_id: c.agent_id,
        work_dir: c.work_dir,
        allow_paths: c.allow_paths,
        deny_paths: c.deny_paths,
        epoch: c.epoch,
        deadline_unix_ms: c.deadline_unix_ms,
        round: c.round,
    }
}

pub fn invocation_pb(call: &ToolInvocation) -> pb::ToolInvocation {
    pb::ToolInvocation {
        call_id: call.call_id.clone(),
        tool_id: call.tool_id.to_string(),
        arguments_json: call.arguments.to_json_text(),
        provider_metadata_json: call.provider_metadata.as_ref().map(Value::to_string),
    }
}

pub fn outcome_pb(o: Outcome) -> i32 {
    (match o {
        Outcome::Known => pb::ExecutionOutcome::Known,
        Outcome::NotSent => pb::ExecutionOutcome::NotSent,
        Outcome::Unknown => pb::ExecutionOutcome::Unknown,
    }) as i32
}

/// An executor's answer. An answer without a result, or with one the runtime cannot read, is
/// kept as the reason (the caller treats it as a broken executor).
pub fn executed(call: &ToolInvocation, resp: pb::ExecuteResponse) -> Executed {
    let result = match resp.result {
        None => Err(format!(
            "the executor answered `{}` without a result",
            call.call_id
        )),
        Some(r) => result_from_pb(r).map_err(|e| e.message),
    };
    let outcome =
        match pb::ExecutionOutcome::try_from(resp.outcome).unwrap_or(pb::ExecutionOutcome::Known) {
            pb::ExecutionOutcome::NotSent => Outcome::NotSent,
            pb::ExecutionOutcome::Unknown => Outcome::Unknown,
            _ => Outcome::Known,
        };
    Executed {
        result,
        outcome,
        raw: resp.raw_result_json,
    }
}

/// A group of records and the audit objects they name, as one append.
pub fn journal_group_pb(g: JournalAppend) -> pb::AppendJournalRequest {
    pb::AppendJournalRequest {
        run_id: g.run_id,
        expected_seq: g.expected_seq,
        records: g.records.iter().map(journal_event_pb).collect(),
        epoch: g.epoch,
        cell_id: g.cell_id,
        objects: g
            .objects
            .into_iter()
            .map(|o| pb::AuditObjectWrite {
                path: o.path,
                content: o.content,
                content_type: o.content_type.to_owned(),
            })
            .collect(),
    }
}
