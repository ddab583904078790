//! (filled by the calls issue)
