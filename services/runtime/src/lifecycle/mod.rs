//! Run and invocation lifecycles: creating a run and its workspace, opening an invocation (the
//! snapshot compiled once from the catalog), and every way they end — finished, failed, closed,
//! cancelled, interrupted by a restart, reaped when idle. Each transition is journalled and the
//! run record saved.
//!
//! Run ownership ([`lease`]): with `[cluster] leases` on, every run is driven under a lease the
//! workspace keeps, renewed in the background; a run whose lease another holder took stops here.
//! A run whose driver died or stopped is taken over by another runtime from its checkpoint
//! ([`takeover`]); one that was ending is finished from its journal ([`ended`]).
//!
//! Sits on `context` (the ports and the book); knows nothing of turns, tools or the loop.

pub mod approvals;
pub mod ended;
pub mod invocations;
pub mod lease;
pub mod resume;
pub mod runs;
pub mod takeover;
pub mod tasks;

pub use approvals::ApprovalFilter;
pub use invocations::{Opened, check_epoch};
pub use runs::{NewRun, driver_str};
pub use takeover::Driver as RunDriver;
