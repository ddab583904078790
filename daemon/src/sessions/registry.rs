//! A session's tool or event registry (02 §10): entries kept sorted by name in one vector.
//!
//! A daemon holds thousands of registries, mostly idle: a sorted vector stores each name once
//! (inside its entry) and no tree nodes, and a lookup is a binary search.

use std::collections::HashSet;
use std::sync::Arc;

use appduct_protocol::descriptor::{EventDescriptor, ToolDescriptor};
use appduct_protocol::limits::MAX_REGISTRY_ENTRIES;

/// An entry a registry orders and finds by name.
pub(super) trait Named {
    fn name(&self) -> &str;
}

impl Named for Arc<ToolDescriptor> {
    fn name(&self) -> &str {
        &self.name
    }
}

impl Named for EventDescriptor {
    fn name(&self) -> &str {
        &self.name
    }
}

/// An upsert of a new name into a registry that already holds [`MAX_REGISTRY_ENTRIES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RegistryFull;

/// Entries by name, in code-point order (byte order of UTF-8).
pub(super) struct Registry<T> {
    entries: Vec<T>,
}

impl<T> Default for Registry<T> {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
        }
    }
}

impl<T: Named> Registry<T> {
    /// The registry of a snapshot, whose names the frame decoder already found distinct.
    pub(super) fn from_snapshot(entries: impl IntoIterator<Item = T>) -> Self {
        let mut entries: Vec<T> = entries.into_iter().collect();
        entries.sort_unstable_by(|a, b| a.name().cmp(b.name()));
        entries.shrink_to_fit();
        Self { entries }
    }

    fn position(&self, name: &str) -> Result<usize, usize> {
        self.entries.binary_search_by(|e| e.name().cmp(name))
    }

    pub(super) fn get(&self, name: &str) -> Option<&T> {
        self.position(name).ok().map(|i| &self.entries[i])
    }

    /// Replaces the entry of the same name, or adds it while there is room.
    pub(super) fn upsert(&mut self, entry: T) -> Result<(), RegistryFull> {
        match self.position(entry.name()) {
            Ok(i) => self.entries[i] = entry,
            Err(_) if self.entries.len() >= MAX_REGISTRY_ENTRIES => return Err(RegistryFull),
            Err(i) => self.entries.insert(i, entry),
        }
        Ok(())
    }

    /// Removes the entry named `name`, if any.
    pub(super) fn remove(&mut self, name: &str) {
        if let Ok(i) = self.position(name) {
            self.entries.remove(i);
        }
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Entries in name order.
    pub(super) fn iter(&self) -> std::slice::Iter<'_, T> {
        self.entries.iter()
    }
}

/// Least number of shared tools before the first sweep.
const MIN_SWEEP: usize = 1024;

/// Tool descriptors shared by every session that registered an equal one: the devices of one
/// app register the same tools, and a fleet of them then holds each descriptor once.
#[derive(Default)]
pub(super) struct SharedTools {
    tools: HashSet<Arc<ToolDescriptor>>,
    /// Size at which descriptors no registry holds any more are dropped: twice the size after
    /// the last sweep, so sweeping costs O(1) per registration over time.
    sweep_at: usize,
}

impl SharedTools {
    /// The shared copy of `tool`.
    pub(super) fn share(&mut self, tool: ToolDescriptor) -> Arc<ToolDescriptor> {
        if let Some(shared) = self.tools.get(&tool) {
            return Arc::clone(shared);
        }
        if self.tools.len() >= self.sweep_at {
            self.tools.retain(|t| Arc::strong_count(t) > 1);
            self.sweep_at = (self.tools.len() * 2).max(MIN_SWEEP);
        }
        let tool = Arc::new(tool);
        self.tools.insert(Arc::clone(&tool));
        tool
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.tools.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: &str, description: &str) -> EventDescriptor {
        EventDescriptor::new(name.to_owned(), description.to_owned())
    }

    fn names(registry: &Registry<EventDescriptor>) -> Vec<&str> {
        registry.iter().map(|e| e.name.as_str()).collect()
    }

    #[test]
    fn snapshots_are_ordered_by_code_point_and_found_by_name() {
        let registry = Registry::from_snapshot([
            event("b", "1"),
            event("Z", "2"),
            event("é", "3"),
            event("a", "4"),
        ]);
        assert_eq!(names(&registry), ["Z", "a", "b", "é"]);
        assert_eq!(registry.len(), 4);
        assert_eq!(registry.get("b").map(|e| e.description.as_str()), Some("1"));
        assert!(registry.get("c").is_none());
        assert!(Registry::<EventDescriptor>::default().get("a").is_none());
    }

    #[test]
    fn upserts_replace_or_insert_in_order_and_removes_forget() {
        let mut registry = Registry::from_snapshot([event("b", "1"), event("d", "2")]);
        assert_eq!(registry.upsert(event("c", "3")), Ok(()));
        assert_eq!(registry.upsert(event("a", "4")), Ok(()));
        assert_eq!(registry.upsert(event("b", "replaced")), Ok(()));
        assert_eq!(names(&registry), ["a", "b", "c", "d"]);
        assert_eq!(
            registry.get("b").map(|e| e.description.as_str()),
            Some("replaced")
        );
        registry.remove("c");
        registry.remove("missing");
        assert_eq!(names(&registry), ["a", "b", "d"]);
    }

    fn tool(name: &str, description: &str) -> ToolDescriptor {
        ToolDescriptor::new(name.to_owned(), description.to_owned())
    }

    #[test]
    fn equal_tools_share_one_copy_and_different_ones_do_not() {
        let mut shared = SharedTools::default();
        let a = shared.share(tool("a", "x"));
        let again = shared.share(tool("a", "x"));
        assert!(Arc::ptr_eq(&a, &again));
        let other = shared.share(tool("a", "y"));
        assert!(!Arc::ptr_eq(&a, &other));
        assert_eq!(other.description, "y");
        assert_eq!(shared.len(), 2);
    }

    #[test]
    fn tools_no_registry_holds_are_swept() {
        let mut shared = SharedTools::default();
        let kept = shared.share(tool("kept", "x"));
        for i in 1..MIN_SWEEP {
            drop(shared.share(tool(&format!("t{i}"), "x")));
        }
        assert_eq!(shared.len(), MIN_SWEEP, "nothing swept below the threshold");
        // The next new tool sweeps: only `kept` is still held elsewhere.
        let fresh = shared.share(tool("fresh", "x"));
        assert_eq!(shared.len(), 2);
        assert!(Arc::ptr_eq(&kept, &shared.share(tool("kept", "x"))));
        assert!(Arc::ptr_eq(&fresh, &shared.share(tool("fresh", "x"))));
    }

    #[test]
    fn a_full_registry_takes_replacements_but_no_new_names() {
        let mut registry = Registry::from_snapshot(
            (0..MAX_REGISTRY_ENTRIES).map(|i| event(&format!("e{i:04}"), "x")),
        );
        assert_eq!(registry.upsert(event("new", "x")), Err(RegistryFull));
        assert_eq!(registry.upsert(event("e0007", "replaced")), Ok(()));
        assert_eq!(registry.len(), MAX_REGISTRY_ENTRIES);
        assert!(registry.get("new").is_none());
    }
}
