//! (filled by a later issue; see ARCHITECTURE.md)
