//! Test support for stores: a simulated crash filesystem and a recording layer to plug under
//! [`crate::FsStore`]. Owns nothing a production store uses; must never be needed at run time
//! (it is public so other crates' tests can prove their own durability claims with it).

mod recording;
mod sim;

pub use recording::{FsOp, RecordingFs};
pub use sim::{CrashMode, SimFs};
