//! (filled by the foundation issue)
