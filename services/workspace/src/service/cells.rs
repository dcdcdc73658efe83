//! The cell a request acts in comes from the caller's credential, never from the request
//! (docs/auth.md, "Cells"): every handler takes its message through [`scoped`], the one rule all
//! services share (`toolplane_serve::cells`). This service keeps runs, objects, journals, chats and skills per cell, so an id of
//! another cell is answered exactly like one that does not exist.

pub(super) use toolplane_serve::cells::scoped;
