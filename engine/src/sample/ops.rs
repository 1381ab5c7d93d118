//! The sample service's op endpoints (`--ops N`) and per-worker code cache (`--code-cache`).
//!
//! A model of why semantic routing pays off for a JIT-compiled monolith (HHVM, ICPE '23,
//! §2.2): every op runs a fixed set of functions, ops of one group share most of theirs,
//! and each worker keeps only `SLOTS` functions "compiled". An instance that serves only a
//! few groups keeps its working set in the cache; one that serves every op keeps missing,
//! and each miss costs real CPU (as a JIT's recompilation or an i-cache miss would, even
//! when the service's own work is slept).
//!
//! Op `k` belongs to group `k % G`. Group `g` owns `FUNCTIONS_PER_GROUP` functions; op `k`
//! runs a deterministic subset of `FUNCTIONS_FROM_GROUP` of them, chosen by a hash of `k`,
//! plus the `COMMON_FUNCTIONS` every op runs. Each (op, function) pair costs a fixed number
//! of work units. Everything but the cache's contents is a pure function of the flags.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::sample::cost::mix64;
use crate::sample::flag::BadFlag;

/// Functions each group owns.
pub const FUNCTIONS_PER_GROUP: u32 = 12;
/// Functions an op runs from its group.
pub const FUNCTIONS_FROM_GROUP: usize = 8;
/// Functions every op runs.
pub const COMMON_FUNCTIONS: u32 = 2;
/// Functions one op runs in all.
pub const FUNCTIONS_PER_OP: usize = FUNCTIONS_FROM_GROUP + COMMON_FUNCTIONS as usize;
/// Work units of one (op, function) pair lie in `MIN_FUNCTION_UNITS..MIN + SPREAD`: an op
/// costs about 100 units (~100 us), near the median of the other endpoints' costs.
pub const MIN_FUNCTION_UNITS: u64 = 6;
pub const FUNCTION_UNITS_SPREAD: u64 = 10;
/// Default `--op-groups`.
pub const DEFAULT_OP_GROUPS: u32 = 4;
/// Default `--miss-units`.
pub const DEFAULT_MISS_UNITS: u64 = 40;
/// Largest `--ops`: a replayed trace has at most 65,535 endpoint labels (and the profile
/// keeps a counter of 8 bytes per (op, function)).
pub const MAX_OPS: u32 = 65_535;
/// Largest `--miss-units`: 100,000 units are already ~0.1 s per miss.
pub const MAX_MISS_UNITS: u64 = 100_000;
/// The prefix of the op endpoints' paths.
pub const OP_PREFIX: &str = "/api/op/";

/// Keeps the op -> function hash independent of the other hashes of the cost model.
const OP_SALT: u64 = 0x6f70_5f66_756e_6373;

/// The ops and their functions: which functions op `k` runs, and what each costs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpCatalog {
    ops: u32,
    groups: u32,
}

impl OpCatalog {
    /// `ops >= 1` and `groups` in `1..=ops` (the service's flags are checked before).
    pub fn new(ops: u32, groups: u32) -> OpCatalog {
        OpCatalog {
            ops: ops.max(1),
            groups: groups.clamp(1, ops.max(1)),
        }
    }

    pub fn ops(&self) -> u32 {
        self.ops
    }

    pub fn groups(&self) -> u32 {
        self.groups
    }

    /// Distinct functions: each group's own, then the common ones.
    pub fn functions(&self) -> u32 {
        self.groups * FUNCTIONS_PER_GROUP + COMMON_FUNCTIONS
    }

    pub fn group_of(&self, op: u32) -> u32 {
        op % self.groups
    }

    /// The op a path names (`/api/op/3` -> 3), if it is one of this catalog's.
    pub fn parse_path(&self, path: &str) -> Option<u32> {
        let digits = path.strip_prefix(OP_PREFIX)?;
        // "+3" and "03" would parse: one spelling per op keeps profiles and routes exact.
        if digits.is_empty()
            || !digits.bytes().all(|b| b.is_ascii_digit())
            || (digits.len() > 1 && digits.starts_with('0'))
        {
            return None;
        }
        digits.parse::<u32>().ok().filter(|&k| k < self.ops)
    }

    /// The functions op `k` runs, in the order it runs them: the common ones first, then
    /// its group's subset in ascending order.
    pub fn functions_of(&self, op: u32) -> [u32; FUNCTIONS_PER_OP] {
        let group = self.group_of(op);
        // A partial Fisher-Yates shuffle of the group's functions, driven by the op's hash.
        let mut pool: [u32; FUNCTIONS_PER_GROUP as usize] = std::array::from_fn(|j| j as u32);
        let mut h = mix64(u64::from(op) ^ OP_SALT);
        for i in 0..FUNCTIONS_FROM_GROUP {
            let remaining = pool.len() - i;
            let pick = i + (h % remaining as u64) as usize;
            pool.swap(i, pick);
            h = mix64(h);
        }
        let mut chosen: [u32; FUNCTIONS_FROM_GROUP] = std::array::from_fn(|i| pool[i]);
        chosen.sort_unstable();
        let common_base = self.groups * FUNCTIONS_PER_GROUP;
        std::array::from_fn(|i| match i.checked_sub(COMMON_FUNCTIONS as usize) {
            None => common_base + i as u32,
            Some(j) => group * FUNCTIONS_PER_GROUP + chosen[j],
        })
    }

    /// Work units op `k` spends in function `f` per call, cache aside.
    pub fn units(&self, op: u32, function: u32) -> u64 {
        let h = mix64(((u64::from(op) << 32) | u64::from(function)) ^ OP_SALT.rotate_left(17));
        MIN_FUNCTION_UNITS + h % FUNCTION_UNITS_SPREAD
    }

    /// A function's name in profiles: `op_g2_f07` (function 7 of group 2), `op_common_0`.
    pub fn function_name(&self, function: u32) -> String {
        let common_base = self.groups * FUNCTIONS_PER_GROUP;
        match function.checked_sub(common_base) {
            Some(c) => format!("op_common_{c}"),
            None => format!(
                "op_g{}_f{:02}",
                function / FUNCTIONS_PER_GROUP,
                function % FUNCTIONS_PER_GROUP
            ),
        }
    }
}

/// A least-recently-used set of function ids drawn from `0..universe`: an intrusive
/// doubly linked list over arrays indexed by id, so a lookup is O(1) whatever `SLOTS` is.
#[derive(Debug, Clone)]
pub struct CodeCache {
    slots: usize,
    len: usize,
    present: Vec<bool>,
    /// Towards the most recently used end, `NONE` at the head.
    newer: Vec<u32>,
    /// Towards the least recently used end, `NONE` at the tail.
    older: Vec<u32>,
    /// Most recently used.
    head: u32,
    /// Least recently used: the next to be evicted.
    tail: u32,
}

const NONE: u32 = u32::MAX;

impl CodeCache {
    pub fn new(slots: usize, universe: u32) -> CodeCache {
        let n = universe as usize;
        CodeCache {
            slots: slots.max(1),
            len: 0,
            present: vec![false; n],
            newer: vec![NONE; n],
            older: vec![NONE; n],
            head: NONE,
            tail: NONE,
        }
    }

    /// Uses `function`: true on a hit. On a miss it is loaded, evicting the least recently
    /// used function when the cache is full. Ids outside the universe always miss.
    pub fn access(&mut self, function: u32) -> bool {
        let f = function as usize;
        if f >= self.present.len() {
            return false;
        }
        if self.present[f] {
            self.unlink(function);
            self.push_head(function);
            return true;
        }
        if self.len == self.slots {
            let victim = self.tail;
            self.unlink(victim);
            self.present[victim as usize] = false;
            self.len -= 1;
        }
        self.present[f] = true;
        self.len += 1;
        self.push_head(function);
        false
    }

    /// The cached functions, most recently used first.
    pub fn contents(&self) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.len);
        let mut at = self.head;
        while at != NONE {
            out.push(at);
            at = self.older[at as usize];
        }
        out
    }

    fn unlink(&mut self, f: u32) {
        let (newer, older) = (self.newer[f as usize], self.older[f as usize]);
        match newer {
            NONE => self.head = older,
            n => self.older[n as usize] = older,
        }
        match older {
            NONE => self.tail = newer,
            o => self.newer[o as usize] = newer,
        }
        self.newer[f as usize] = NONE;
        self.older[f as usize] = NONE;
    }

    fn push_head(&mut self, f: u32) {
        self.older[f as usize] = self.head;
        self.newer[f as usize] = NONE;
        match self.head {
            NONE => self.tail = f,
            h => self.newer[h as usize] = f,
        }
        self.head = f;
    }
}

/// The ops' settings and the counters all workers share.
#[derive(Debug)]
pub struct Ops {
    pub catalog: OpCatalog,
    /// `--code-cache` slots per worker; `None`: no cache, no miss cost.
    pub cache_slots: Option<u32>,
    pub miss_units: u64,
    /// Work units spent per (op, position in `functions_of(op)`), misses included.
    spent_units: Vec<AtomicU64>,
}

/// What one op request cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpCost {
    /// The functions' own units (slept under `--work sleep`, like any request's work).
    pub units: u64,
    /// Code cache lookups (0 without a cache) and misses; each miss burns `miss_units`
    /// of real CPU.
    pub lookups: u64,
    pub misses: u64,
}

impl Ops {
    /// Checks `--ops`, `--op-groups`, `--code-cache` and `--miss-units`; `None` without ops.
    pub fn from_flags(
        ops: u32,
        groups: Option<u32>,
        cache_slots: Option<u32>,
        miss_units: Option<u64>,
    ) -> Result<Option<Ops>, BadFlag> {
        let bad =
            |flag: &'static str, value: String, hint: &'static str| BadFlag { flag, value, hint };
        if ops > MAX_OPS {
            return Err(bad(
                "ops",
                ops.to_string(),
                "write at most 65535 op endpoints (a trace labels at most 65535 endpoints), or 0 for none",
            ));
        }
        if ops == 0 {
            let needs_ops = [
                ("op-groups", groups.map(|g| g.to_string())),
                ("code-cache", cache_slots.map(|c| c.to_string())),
                ("miss-units", miss_units.map(|u| u.to_string())),
            ];
            if let Some((flag, Some(value))) = needs_ops.into_iter().find(|(_, v)| v.is_some()) {
                return Err(bad(
                    flag,
                    value,
                    "it shapes the op endpoints: pass --ops N too",
                ));
            }
            return Ok(None);
        }
        let groups = match groups {
            None => DEFAULT_OP_GROUPS.min(ops),
            Some(g) if (1..=ops).contains(&g) => g,
            Some(g) => {
                return Err(bad(
                    "op-groups",
                    g.to_string(),
                    "write a number of groups from 1 to --ops",
                ))
            }
        };
        if cache_slots == Some(0) {
            return Err(bad(
                "code-cache",
                "0".into(),
                "write a number of functions per worker >= 1, or leave it out for no cache",
            ));
        }
        let miss_units = match (miss_units, cache_slots) {
            (Some(u), None) => {
                return Err(bad(
                    "miss-units",
                    u.to_string(),
                    "a miss is the code cache's: pass --code-cache SLOTS too",
                ))
            }
            (Some(u), Some(_)) if u > MAX_MISS_UNITS => {
                return Err(bad(
                    "miss-units",
                    u.to_string(),
                    "write at most 100000 work units per miss",
                ))
            }
            (u, _) => u.unwrap_or(DEFAULT_MISS_UNITS),
        };
        Ok(Some(Ops::new(
            OpCatalog::new(ops, groups),
            cache_slots,
            miss_units,
        )))
    }

    pub fn new(catalog: OpCatalog, cache_slots: Option<u32>, miss_units: u64) -> Ops {
        let counters = catalog.ops() as usize * FUNCTIONS_PER_OP;
        Ops {
            catalog,
            cache_slots,
            miss_units,
            spent_units: (0..counters).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// A worker's own code cache, if there is one.
    pub fn worker_cache(&self) -> Option<CodeCache> {
        self.cache_slots
            .map(|slots| CodeCache::new(slots as usize, self.catalog.functions()))
    }

    /// Runs op `k` through `cache` (a worker's), counting it in the profile.
    pub fn run(&self, op: u32, mut cache: Option<&mut CodeCache>) -> OpCost {
        let functions = self.catalog.functions_of(op);
        let base = op as usize * FUNCTIONS_PER_OP;
        let mut cost = OpCost {
            units: 0,
            lookups: 0,
            misses: 0,
        };
        for (i, &f) in functions.iter().enumerate() {
            let own = self.catalog.units(op, f);
            let missed = cache.as_deref_mut().is_some_and(|c| !c.access(f));
            let spent = own + if missed { self.miss_units } else { 0 };
            cost.units += own;
            cost.lookups += u64::from(cache.is_some());
            cost.misses += u64::from(missed);
            if let Some(counter) = self.spent_units.get(base + i) {
                counter.fetch_add(spent, Ordering::Relaxed);
            }
        }
        cost
    }

    /// `/debug/profile`: folded stacks, one line per (op, function) executed so far,
    /// `/api/op/3;op_common_0 1234` (work units spent there, code cache misses included).
    pub fn render_profile(&self) -> String {
        let mut out = String::new();
        for op in 0..self.catalog.ops() {
            let base = op as usize * FUNCTIONS_PER_OP;
            for (i, f) in self.catalog.functions_of(op).into_iter().enumerate() {
                let spent = self
                    .spent_units
                    .get(base + i)
                    .map_or(0, |c| c.load(Ordering::Relaxed));
                if spent > 0 {
                    let name = self.catalog.function_name(f);
                    let _ = writeln!(out, "{OP_PREFIX}{op};{name} {spent}");
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn each_op_runs_eight_of_its_groups_functions_and_the_common_ones() {
        let catalog = OpCatalog::new(40, 4);
        assert_eq!(catalog.functions(), 4 * 12 + 2);
        let mut subsets = HashSet::new();
        for op in 0..40 {
            let fns = catalog.functions_of(op);
            assert_eq!(fns, catalog.functions_of(op), "deterministic");
            let distinct: HashSet<u32> = fns.iter().copied().collect();
            assert_eq!(distinct.len(), FUNCTIONS_PER_OP);
            assert_eq!(&fns[..2], &[48, 49], "common functions first");
            let group = op % 4;
            for &f in &fns[2..] {
                assert_eq!(f / FUNCTIONS_PER_GROUP, group, "op {op} ran {f}");
            }
            subsets.insert(fns);
        }
        // Ops of a group do not all run the same subset.
        assert!(subsets.len() > 30, "{} distinct subsets", subsets.len());
    }

    #[test]
    fn every_function_of_a_group_is_run_by_some_op() {
        let catalog = OpCatalog::new(64, 4);
        let used: HashSet<u32> = (0..64).flat_map(|op| catalog.functions_of(op)).collect();
        assert_eq!(used.len(), catalog.functions() as usize);
    }

    #[test]
    fn functions_are_named_by_group_or_as_common() {
        let catalog = OpCatalog::new(8, 2);
        assert_eq!(catalog.function_name(0), "op_g0_f00");
        assert_eq!(catalog.function_name(19), "op_g1_f07");
        assert_eq!(catalog.function_name(24), "op_common_0");
        assert_eq!(catalog.function_name(25), "op_common_1");
    }

    #[test]
    fn op_paths_parse_only_in_range_and_in_one_spelling() {
        let catalog = OpCatalog::new(10, 4);
        assert_eq!(catalog.parse_path("/api/op/0"), Some(0));
        assert_eq!(catalog.parse_path("/api/op/9"), Some(9));
        for bad in [
            "/api/op/10",
            "/api/op/",
            "/api/op/03",
            "/api/op/+3",
            "/api/op/x",
            "/api/ops/1",
        ] {
            assert_eq!(catalog.parse_path(bad), None, "{bad}");
        }
    }

    #[test]
    fn an_op_costs_about_a_hundred_units_the_same_every_time() {
        let catalog = OpCatalog::new(100, 4);
        let mean = (0..100)
            .map(|op| {
                catalog
                    .functions_of(op)
                    .iter()
                    .map(|&f| catalog.units(op, f))
                    .sum::<u64>()
            })
            .sum::<u64>() as f64
            / 100.0;
        assert!((90.0..120.0).contains(&mean), "{mean}");
        assert_eq!(catalog.units(3, 5), catalog.units(3, 5));
    }

    #[test]
    fn the_cache_hits_misses_and_evicts_the_least_recently_used() {
        let mut cache = CodeCache::new(3, 10);
        assert!(!cache.access(1) && !cache.access(2) && !cache.access(3));
        assert_eq!(cache.contents(), vec![3, 2, 1]);
        assert!(cache.access(1), "a hit");
        assert_eq!(cache.contents(), vec![1, 3, 2]);
        assert!(!cache.access(4), "a miss evicts 2, the least recently used");
        assert_eq!(cache.contents(), vec![4, 1, 3]);
        assert!(!cache.access(2));
        assert_eq!(cache.contents(), vec![2, 4, 1]);
        assert!(cache.access(1) && cache.access(1));
        assert_eq!(cache.contents(), vec![1, 2, 4]);
        assert!(!cache.access(99), "outside the universe");
        let mut one = CodeCache::new(1, 4);
        assert!(!one.access(0) && one.access(0) && !one.access(1) && !one.access(0));
        assert_eq!(one.contents(), vec![0]);
    }

    #[test]
    fn one_groups_ops_fit_a_cache_that_all_ops_thrash() {
        let ops = Ops::new(OpCatalog::new(64, 4), Some(16), 40);
        let miss_rate = |group_only: bool| {
            let mut cache = ops.worker_cache().unwrap();
            let (mut misses, mut calls) = (0u64, 0u64);
            for i in 0..2_000u64 {
                let op = (mix64(i) % 64) as u32;
                let op = if group_only { op - op % 4 } else { op };
                misses += ops.run(op, Some(&mut cache)).misses;
                calls += FUNCTIONS_PER_OP as u64;
            }
            misses as f64 / calls as f64
        };
        let (one, all) = (miss_rate(true), miss_rate(false));
        assert!(one < 0.01 && all > 0.2, "one group {one}, all groups {all}");
    }

    #[test]
    fn bad_op_flags_name_the_flag() {
        let err = |ops, groups, cache, miss| {
            Ops::from_flags(ops, groups, cache, miss)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(err(0, None, Some(16), None).contains("--code-cache 16"));
        assert!(err(0, Some(2), None, None).contains("--op-groups 2"));
        assert!(err(8, Some(9), None, None).contains("--op-groups 9"));
        assert!(err(8, Some(0), None, None).contains("--op-groups 0"));
        assert!(err(8, None, Some(0), None).contains("--code-cache 0"));
        assert!(err(8, None, None, Some(10)).contains("--miss-units 10"));
        assert!(err(8, None, Some(4), Some(1 << 40)).contains("--miss-units"));
        assert!(err(1 << 20, None, None, None).contains("--ops"));
        assert!(Ops::from_flags(0, None, None, None).unwrap().is_none());
        let two = Ops::from_flags(2, None, Some(4), None).unwrap().unwrap();
        assert_eq!(
            (two.catalog.groups(), two.miss_units),
            (2, DEFAULT_MISS_UNITS)
        );
    }

    #[test]
    fn the_profile_is_folded_stacks_of_what_ran() {
        let ops = Ops::new(OpCatalog::new(8, 2), Some(4), 40);
        let mut cache = ops.worker_cache().unwrap();
        let first = ops.run(3, Some(&mut cache));
        assert_eq!(
            first.misses, FUNCTIONS_PER_OP as u64,
            "a cold cache misses all"
        );
        assert_eq!(first.lookups, FUNCTIONS_PER_OP as u64);
        let profile = ops.render_profile();
        let lines: Vec<&str> = profile.lines().collect();
        assert_eq!(lines.len(), FUNCTIONS_PER_OP);
        let mut total = 0;
        for line in &lines {
            let (stack, count) = line.rsplit_once(' ').unwrap();
            let (root, function) = stack.split_once(';').unwrap();
            assert_eq!(root, "/api/op/3");
            assert!(function.starts_with("op_g1_") || function.starts_with("op_common_"));
            total += count.parse::<u64>().unwrap();
        }
        assert_eq!(total, first.units + first.misses * 40);
        assert!(lines[0].starts_with("/api/op/3;op_common_0 "));
        let no_cache = Ops::new(OpCatalog::new(8, 2), None, 40);
        let uncached = no_cache.run(3, None);
        assert_eq!((uncached.lookups, uncached.misses), (0, 0));
        assert_eq!(uncached.units, first.units);
    }
}
