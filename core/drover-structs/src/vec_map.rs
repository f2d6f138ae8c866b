//! A map kept as one sorted vector, for the small maps every allocation carries.
//!
//! An allocation holds a dozen maps of one to five entries (its task resources, the per-node
//! scores of its placement metrics, the filtered and available node counts). As `BTreeMap`s each
//! costs a whole B-tree node, about 11 slots, whatever it holds: a one-entry map of task
//! resources is 1.3 KB. A million allocations made that most of the server's memory. `VecMap`
//! holds exactly its entries, in key order, and reads, iterates and serializes like a
//! `BTreeMap` (a JSON object with sorted keys), so the API is unchanged. Lookups are binary
//! searches; inserts shift the tail, which is nothing at these sizes and the wrong choice for
//! large maps.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Clone, PartialEq, Eq, Hash)]
pub struct VecMap<K, V> {
    /// Sorted by key, keys unique.
    entries: Vec<(K, V)>,
}

impl<K, V> Default for VecMap<K, V> {
    fn default() -> Self {
        VecMap {
            entries: Vec::new(),
        }
    }
}

impl<K: fmt::Debug, V: fmt::Debug> fmt::Debug for VecMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.entries.iter().map(|(k, v)| (k, v)))
            .finish()
    }
}

type Pair<K, V> = (K, V);

impl<K, V> VecMap<K, V> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_capacity(capacity: usize) -> Self {
        VecMap {
            entries: Vec::with_capacity(capacity),
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn iter(&self) -> Iter<'_, K, V> {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&K, &mut V)> {
        self.entries.iter_mut().map(|(k, v)| (&*k, v))
    }

    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &K> + ExactSizeIterator {
        self.entries.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> + ExactSizeIterator {
        self.entries.iter().map(|(_, v)| v)
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.entries.iter_mut().map(|(_, v)| v)
    }

    pub fn into_values(self) -> impl Iterator<Item = V> {
        self.entries.into_iter().map(|(_, v)| v)
    }

    pub fn first_key_value(&self) -> Option<(&K, &V)> {
        self.entries.first().map(|(k, v)| (k, v))
    }
}

/// `VecMap::iter`'s iterator: a named type, so `&VecMap` can be `IntoIterator`.
pub type Iter<'a, K, V> =
    std::iter::Map<std::slice::Iter<'a, Pair<K, V>>, fn(&'a Pair<K, V>) -> (&'a K, &'a V)>;

impl<K: Ord, V> VecMap<K, V> {
    fn position<Q>(&self, key: &Q) -> Result<usize, usize>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.entries.binary_search_by(|(k, _)| k.borrow().cmp(key))
    }

    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.position(key).ok().map(|i| &self.entries[i].1)
    }

    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        match self.position(key) {
            Ok(i) => Some(&mut self.entries[i].1),
            Err(_) => None,
        }
    }

    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.position(key).is_ok()
    }

    /// Inserts or replaces; returns the value replaced.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self.position(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].1, value)),
            Err(i) => {
                self.entries.insert(i, (key, value));
                None
            }
        }
    }

    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.position(key).ok().map(|i| self.entries.remove(i).1)
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&K, &mut V) -> bool) {
        self.entries.retain_mut(|(k, v)| keep(k, v));
    }

    /// The value under `key`, inserted first as `default()` when absent.
    pub fn get_or_insert_with(&mut self, key: K, default: impl FnOnce() -> V) -> &mut V {
        let i = match self.position(&key) {
            Ok(i) => i,
            Err(i) => {
                self.entries.insert(i, (key, default()));
                i
            }
        };
        &mut self.entries[i].1
    }
}

/// A key's place in a [`VecMap`], as `BTreeMap::entry` gives it.
pub struct Entry<'a, K, V> {
    map: &'a mut VecMap<K, V>,
    key: K,
}

impl<'a, K: Ord, V> Entry<'a, K, V> {
    pub fn or_insert(self, default: V) -> &'a mut V {
        self.map.get_or_insert_with(self.key, || default)
    }

    pub fn or_insert_with(self, default: impl FnOnce() -> V) -> &'a mut V {
        self.map.get_or_insert_with(self.key, default)
    }

    pub fn or_default(self) -> &'a mut V
    where
        V: Default,
    {
        self.map.get_or_insert_with(self.key, V::default)
    }
}

impl<K: Ord, V> VecMap<K, V> {
    pub fn entry(&mut self, key: K) -> Entry<'_, K, V> {
        Entry { map: self, key }
    }
}

impl<K: Ord, V> VecMap<K, V> {
    /// A map of these pairs, in any order; of two pairs with the same key the later wins, as
    /// with inserts. Holds no spare capacity.
    fn from_pairs(mut entries: Vec<(K, V)>) -> Self {
        if !entries.is_sorted_by(|a, b| a.0 < b.0) {
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            // `dedup_by` keeps the first of equal neighbours; hand it the later value.
            entries.dedup_by(|later, kept| {
                let same = later.0 == kept.0;
                if same {
                    std::mem::swap(later, kept);
                }
                same
            });
        }
        entries.shrink_to_fit();
        VecMap { entries }
    }
}

impl<K: Ord, V> FromIterator<(K, V)> for VecMap<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        Self::from_pairs(iter.into_iter().collect())
    }
}

impl<K: Ord, V> Extend<(K, V)> for VecMap<K, V> {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        for (k, v) in iter {
            self.insert(k, v);
        }
    }
}

impl<K: Ord, V, const N: usize> From<[(K, V); N]> for VecMap<K, V> {
    fn from(pairs: [(K, V); N]) -> Self {
        pairs.into_iter().collect()
    }
}

impl<K: Ord, V> From<BTreeMap<K, V>> for VecMap<K, V> {
    fn from(map: BTreeMap<K, V>) -> Self {
        // Already sorted and unique.
        VecMap {
            entries: map.into_iter().collect(),
        }
    }
}

impl<K: Ord, V> From<VecMap<K, V>> for BTreeMap<K, V> {
    fn from(map: VecMap<K, V>) -> Self {
        map.entries.into_iter().collect()
    }
}

impl<K, V> IntoIterator for VecMap<K, V> {
    type Item = (K, V);
    type IntoIter = std::vec::IntoIter<(K, V)>;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

impl<'a, K, V> IntoIterator for &'a VecMap<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = Iter<'a, K, V>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<K, V, Q> std::ops::Index<&Q> for VecMap<K, V>
where
    K: Ord + Borrow<Q>,
    Q: Ord + ?Sized,
{
    type Output = V;
    /// Panics when the key is absent, as `BTreeMap`'s index does.
    fn index(&self, key: &Q) -> &V {
        match self.get(key) {
            Some(v) => v,
            None => panic!("key not in VecMap"),
        }
    }
}

impl<K: Serialize, V: Serialize> Serialize for VecMap<K, V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.entries.len()))?;
        for (k, v) in &self.entries {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de, K: Deserialize<'de> + Ord, V: Deserialize<'de>> Deserialize<'de> for VecMap<K, V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MapVisitor<K, V>(PhantomData<(K, V)>);
        impl<'de, K: Deserialize<'de> + Ord, V: Deserialize<'de>> Visitor<'de> for MapVisitor<K, V> {
            type Value = VecMap<K, V>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
                let mut pairs = Vec::with_capacity(access.size_hint().unwrap_or(0).min(64));
                while let Some(pair) = access.next_entry()? {
                    pairs.push(pair);
                }
                // Later duplicates replace earlier ones, as in a `BTreeMap`.
                Ok(VecMap::from_pairs(pairs))
            }
        }
        deserializer.deserialize_map(MapVisitor(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_keys_sorted_and_unique_like_a_btreemap() {
        let mut m = VecMap::new();
        assert_eq!(m.insert("b".to_string(), 2), None);
        m.insert("c".to_string(), 3);
        m.insert("a".to_string(), 1);
        assert_eq!(m.insert("b".to_string(), 20), Some(2));
        assert_eq!(m.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
        assert_eq!(m.get("b"), Some(&20));
        assert_eq!(m["c"], 3);
        assert_eq!(m.remove("a"), Some(1));
        assert!(!m.contains_key("a"));
        *m.get_or_insert_with("d".into(), || 0) += 4;
        *m.get_or_insert_with("d".into(), || 0) += 4;
        assert_eq!(m.get("d"), Some(&8));
        assert_eq!(m.len(), 3);
    }

    #[test]
    fn json_is_a_btreemaps_json_both_ways() {
        let b: BTreeMap<String, f64> =
            BTreeMap::from([("z".into(), 1.5), ("a".into(), 0.25), ("m".into(), -3.0)]);
        let v: VecMap<String, f64> = b.clone().into();
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            serde_json::to_string(&b).unwrap()
        );
        let back: VecMap<String, f64> =
            serde_json::from_str(r#"{"z":1.5,"a":0.25,"m":-3.0,"a":0.5}"#).unwrap();
        assert_eq!(back.keys().collect::<Vec<_>>(), ["a", "m", "z"]);
        assert_eq!(back.get("a"), Some(&0.5), "a later duplicate wins");
        assert!(serde_json::from_str::<VecMap<String, f64>>("[1]").is_err());
    }

    #[test]
    fn holds_only_its_entries() {
        let m: VecMap<String, u64> = [("only".to_string(), 1u64)].into();
        assert_eq!(m.entries.capacity(), 1);
        let m: VecMap<String, u64> = serde_json::from_str(r#"{"a":1,"b":2}"#).unwrap();
        assert_eq!(m.entries.capacity(), 2);
        let m: VecMap<&str, u64> = [("b", 1), ("a", 2), ("b", 3)].into_iter().collect();
        assert_eq!(m.iter().collect::<Vec<_>>(), [(&"a", &2), (&"b", &3)]);
    }
}
