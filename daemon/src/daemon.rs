//! (filled by the daemon core issue)
