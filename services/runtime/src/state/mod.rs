//! The run and invocation book: runs, invocations, delegated tasks and the journal's sequencing,
//! as data and the transitions on it. The bottom of the runtime's layers (ARCHITECTURE.md): it
//! performs no IO and never names a peer, a port or a protobuf type; everything above reads and
//! changes runs through these types.

pub mod approvals;
pub mod held;
pub mod invocation;
pub mod journal;
pub mod run;
pub mod tasks;

pub use approvals::{Approval, ApprovalKind, ApprovalState, Approvals, Decision};
pub use held::{HeldRecord, TurnStage};
pub use invocation::{
    Conversation, HeldCall, HeldTurn, Invocation, InvocationInner, InvocationStatus, turn_id,
};
pub use journal::{
    AuditObject, Event, Journal, JournalAppend, Level, Record, now_ms, response_path,
};
pub use run::{Driver, Failure, Run, RunMode, RunRecord, RunStatus, RunToolHostRecord};
pub use tasks::{CancelFlag, PendingTask, RunAgents, Stop, Task, TaskResult, TaskStatus};
