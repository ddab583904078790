//! A session's tool or event registry (§D8): entries kept sorted by name in one vector.
//!
//! A daemon holds thousands of registries, mostly idle: a sorted vector stores each name once
//! (inside its entry) and no tree nodes, and a lookup is a binary search.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

use appduct_protocol::descriptor::{EventDescriptor, ToolDescriptor};
use appduct_protocol::limits::MAX_REGISTRY_ENTRIES;

use crate::arguments::InputCheck;

/// An entry a registry orders and finds by name.
pub(super) trait Named {
    fn name(&self) -> &str;
    /// What [`appduct_protocol::limits::MAX_REGISTRY_BYTES`] counts of the entry.
    fn held_bytes(&self) -> usize;
}

impl Named for Arc<SharedTool> {
    fn name(&self) -> &str {
        &self.descriptor.name
    }
    fn held_bytes(&self) -> usize {
        self.descriptor.held_bytes()
    }
}

/// A tool descriptor as registries hold it: one copy for every session that registered an equal
/// descriptor ([`SharedTools`]), with what the daemon derives from it once for all of them (the
/// compiled input schema of §C10.8). Reads as the descriptor.
#[derive(Debug)]
pub struct SharedTool {
    descriptor: ToolDescriptor,
    input: InputCheck,
}

impl SharedTool {
    pub fn new(descriptor: ToolDescriptor) -> Self {
        Self {
            descriptor,
            input: InputCheck::default(),
        }
    }

    pub fn descriptor(&self) -> &ToolDescriptor {
        &self.descriptor
    }

    /// The input schema's compiled form, shared by every session holding this descriptor.
    pub fn input_check(&self) -> &InputCheck {
        &self.input
    }
}

impl Deref for SharedTool {
    type Target = ToolDescriptor;
    fn deref(&self) -> &ToolDescriptor {
        &self.descriptor
    }
}

/// A [`SharedTools`] entry, found by the descriptor it holds.
struct Interned(Arc<SharedTool>);

impl PartialEq for Interned {
    fn eq(&self, other: &Self) -> bool {
        self.0.descriptor == other.0.descriptor
    }
}

impl Eq for Interned {}

impl Hash for Interned {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.descriptor.hash(state);
    }
}

impl Borrow<ToolDescriptor> for Interned {
    fn borrow(&self) -> &ToolDescriptor {
        &self.0.descriptor
    }
}

impl Named for EventDescriptor {
    fn name(&self) -> &str {
        &self.name
    }
    fn held_bytes(&self) -> usize {
        EventDescriptor::held_bytes(self)
    }
}

/// Why an upsert was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RegistryFull {
    /// A new name into a registry that already holds [`MAX_REGISTRY_ENTRIES`].
    Entries,
    /// The registry would hold more than the bytes it was allowed.
    Bytes,
}

/// Entries by name, in code-point order (byte order of UTF-8).
pub(super) struct Registry<T> {
    entries: Vec<T>,
    /// Sum of the entries' `held_bytes`.
    bytes: usize,
}

impl<T> Default for Registry<T> {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
            bytes: 0,
        }
    }
}

impl<T: Named> Registry<T> {
    /// The registry of a snapshot, whose names the frame decoder already found distinct.
    pub(super) fn from_snapshot(entries: impl IntoIterator<Item = T>) -> Self {
        let mut entries: Vec<T> = entries.into_iter().collect();
        entries.sort_unstable_by(|a, b| a.name().cmp(b.name()));
        entries.shrink_to_fit();
        let bytes = entries.iter().map(Named::held_bytes).sum();
        Self { entries, bytes }
    }

    /// Sum of the entries' `held_bytes`.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    fn position(&self, name: &str) -> Result<usize, usize> {
        self.entries.binary_search_by(|e| e.name().cmp(name))
    }

    pub(super) fn get(&self, name: &str) -> Option<&T> {
        self.position(name).ok().map(|i| &self.entries[i])
    }

    /// Replaces the entry of the same name, or adds it while there is room, as long as the
    /// registry then holds at most `max_bytes`; a refusal changes nothing.
    pub(super) fn upsert(&mut self, entry: T, max_bytes: usize) -> Result<(), RegistryFull> {
        let position = self.position(entry.name());
        let replaced = position.map_or(0, |i| self.entries[i].held_bytes());
        let bytes = self.bytes - replaced + entry.held_bytes();
        if bytes > max_bytes {
            return Err(RegistryFull::Bytes);
        }
        match position {
            Ok(i) => self.entries[i] = entry,
            Err(_) if self.entries.len() >= MAX_REGISTRY_ENTRIES => {
                return Err(RegistryFull::Entries);
            }
            Err(i) => self.entries.insert(i, entry),
        }
        self.bytes = bytes;
        Ok(())
    }

    /// Removes the entry named `name`, if any.
    pub(super) fn remove(&mut self, name: &str) {
        if let Ok(i) = self.position(name) {
            self.bytes -= self.entries.remove(i).held_bytes();
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
/// app register the same tools, and a fleet of them then holds each descriptor once (and
/// compiles its input schema once, §C10.8).
#[derive(Default)]
pub(super) struct SharedTools {
    tools: HashSet<Interned>,
    /// Size at which descriptors no registry holds any more are dropped: twice the size after
    /// the last sweep, so sweeping costs O(1) per registration over time.
    sweep_at: usize,
}

impl SharedTools {
    /// The shared copy of `tool`.
    pub(super) fn share(&mut self, tool: ToolDescriptor) -> Arc<SharedTool> {
        if let Some(shared) = self.tools.get(&tool) {
            return Arc::clone(&shared.0);
        }
        if self.tools.len() >= self.sweep_at {
            self.tools.retain(|t| Arc::strong_count(&t.0) > 1);
            self.sweep_at = (self.tools.len() * 2).max(MIN_SWEEP);
        }
        let tool = Arc::new(SharedTool::new(tool));
        self.tools.insert(Interned(Arc::clone(&tool)));
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
        assert_eq!(registry.upsert(event("c", "3"), usize::MAX), Ok(()));
        assert_eq!(registry.upsert(event("a", "4"), usize::MAX), Ok(()));
        assert_eq!(registry.upsert(event("b", "replaced"), usize::MAX), Ok(()));
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
        assert_eq!(
            registry.upsert(event("new", "x"), usize::MAX),
            Err(RegistryFull::Entries)
        );
        assert_eq!(
            registry.upsert(event("e0007", "replaced"), usize::MAX),
            Ok(())
        );
        assert_eq!(registry.len(), MAX_REGISTRY_ENTRIES);
        assert!(registry.get("new").is_none());
    }

    #[test]
    fn bytes_follow_snapshots_upserts_and_removes_and_a_refusal_changes_nothing() {
        let one = event("a", "xx").held_bytes();
        let mut registry = Registry::from_snapshot([event("a", "xx"), event("b", "xx")]);
        assert_eq!(registry.bytes(), 2 * one);
        // Replacing counts the new entry instead of the old one.
        assert_eq!(registry.upsert(event("a", "xxxx"), usize::MAX), Ok(()));
        assert_eq!(registry.bytes(), 2 * one + 2);
        registry.remove("a");
        assert_eq!(registry.bytes(), one);
        // Exactly at the bound passes; one byte past it is refused and leaves all as it was.
        assert_eq!(registry.upsert(event("c", "xx"), 2 * one), Ok(()));
        assert_eq!(
            registry.upsert(event("b", "xxx"), 2 * one),
            Err(RegistryFull::Bytes)
        );
        assert_eq!(registry.bytes(), 2 * one);
        assert_eq!(
            registry.get("b").map(|e| e.description.as_str()),
            Some("xx")
        );
    }
}
