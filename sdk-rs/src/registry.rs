//! The app's tool and event registries: ordered by registration, keyed by name, with
//! registration ids so a disposer only ever removes its own registration (§T3.1).

use appduct_protocol::limits::MAX_REGISTRY_ENTRIES;

use crate::types::RegistrationError;

/// Identifies one registration. A new registration under the same name gets a new id, so an
/// old disposer stays a no-op.
pub type RegistrationId = u64;

#[derive(Debug, Clone)]
struct Entry<D> {
    id: RegistrationId,
    name: String,
    descriptor: D,
}

/// Named entries in registration order. Re-registering a name replaces the entry in place.
#[derive(Debug, Clone)]
pub(crate) struct Registry<D> {
    entries: Vec<Entry<D>>,
}

impl<D> Default for Registry<D> {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
        }
    }
}

impl<D> Registry<D> {
    /// Inserts or replaces `name`. Refused only when a new name would exceed 2048 entries
    /// (§D8.3); nothing changes then.
    pub fn upsert(
        &mut self,
        id: RegistrationId,
        name: &str,
        descriptor: D,
    ) -> Result<(), RegistrationError> {
        if let Some(entry) = self.entries.iter_mut().find(|e| e.name == name) {
            entry.id = id;
            entry.descriptor = descriptor;
            return Ok(());
        }
        if self.entries.len() >= MAX_REGISTRY_ENTRIES {
            return Err(RegistrationError::RegistryFull {
                limit: MAX_REGISTRY_ENTRIES,
            });
        }
        self.entries.push(Entry {
            id,
            name: name.to_owned(),
            descriptor,
        });
        Ok(())
    }

    /// Removes the entry registered under `id`, if it is still current; returns its name.
    pub fn remove(&mut self, id: RegistrationId) -> Option<String> {
        let idx = self.entries.iter().position(|e| e.id == id)?;
        Some(self.entries.remove(idx).name)
    }

    pub fn get(&self, name: &str) -> Option<(RegistrationId, &D)> {
        self.entries
            .iter()
            .find(|e| e.name == name)
            .map(|e| (e.id, &e.descriptor))
    }

    pub fn descriptors(&self) -> impl Iterator<Item = &D> {
        self.entries.iter().map(|e| &e.descriptor)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replacing_keeps_the_position_and_retires_the_old_id() {
        let mut r = Registry::default();
        r.upsert(1, "a", "first").unwrap();
        r.upsert(2, "b", "b").unwrap();
        r.upsert(3, "a", "second").unwrap();
        assert_eq!(
            r.descriptors().copied().collect::<Vec<_>>(),
            ["second", "b"]
        );
        assert_eq!(r.remove(1), None, "the old disposer is a no-op");
        assert_eq!(r.get("a").map(|(id, _)| id), Some(3));
        assert_eq!(r.remove(3).as_deref(), Some("a"));
        assert_eq!(r.remove(3), None, "removing twice is a no-op");
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn the_registry_is_capped_for_new_names_only() {
        let mut r = Registry::default();
        for i in 0..MAX_REGISTRY_ENTRIES {
            r.upsert(i as u64, &format!("t{i}"), ()).unwrap();
        }
        assert_eq!(
            r.upsert(99_999, "one_more", ()),
            Err(RegistrationError::RegistryFull {
                limit: MAX_REGISTRY_ENTRIES
            })
        );
        assert!(r.upsert(99_999, "t0", ()).is_ok(), "replacing is allowed");
    }
}
