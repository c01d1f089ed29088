//! The worker's scheduler: which lanes (one tenant's ready work at one priority) a claim takes
//! from, and how many rows from each (docs/decisions/080-fair-claims.md).
//!
//! Stride scheduling on two levels, in whole numbers: each class and each lane has a *pass*; a
//! claim slot goes to the class with the lowest pass among those with work (interactive on a tie),
//! and within it to the lane with the lowest pass; the pass then moves on by the stride, the
//! inverse of the weight. Interactive and bulk weigh `100 − BULK_SHARE_PERCENT` and
//! `BULK_SHARE_PERCENT`, so bulk keeps its share of the claims while interactive work waits and
//! takes all of them otherwise; a lane weighs its tenant's share, so tenants take turns in
//! proportion to their shares whatever each has queued. A class or lane that comes back after a
//! pause starts at the current pass of the others: credit is not saved up while idle.
//!
//! The lanes are read from the ledger ([`Queue::ready_lanes`](payonce_ledger::Queue::ready_lanes))
//! at most every [`LANE_REFRESH`] while work flows, and again whenever the known lanes run dry. A
//! lane whose claim came back short is dropped until the next read (drained, or its rows held by
//! another worker).

use payonce_core::clock::Timestamp;
use payonce_core::priority::{BULK_SHARE_PERCENT, Priority};
use payonce_ledger::Operation;
use payonce_ledger::lanes::{Lane, ReadyLane, Take};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::time::{Duration, Instant};

/// How often a busy worker reads the lanes again: a new tenant's or a new interactive payment's
/// lane is claimed from within this (plus one claim).
pub const LANE_REFRESH: Duration = Duration::from_millis(250);
/// One slot's worth of pass at weight 1.
const STRIDE_ONE: u64 = 1_000_000_000;

/// Which lanes hold due work and whose turn it is.
#[derive(Debug, Default)]
pub struct Fair {
    /// Lanes with due work as last read, less those found dry since, with their pass.
    lanes: BTreeMap<Lane, LanePass>,
    /// Each class's pass: interactive, bulk.
    class_pass: [u64; 2],
    /// When the lanes were last read; `None`: they must be read before the next plan.
    read_at: Option<Instant>,
}

#[derive(Debug, Clone, Copy)]
struct LanePass {
    pass: u64,
    share: u32,
    /// Its tenant's own cap, submissions a second across the fleet.
    cap: Option<u32>,
}

fn class(priority: Priority) -> usize {
    match priority {
        Priority::Interactive => 0,
        Priority::Bulk => 1,
    }
}

/// The stride of a class: the inverse of its weight (percent of the slots while both wait).
fn class_stride(c: usize) -> u64 {
    let weight = if c == 0 {
        100 - BULK_SHARE_PERCENT
    } else {
        BULK_SHARE_PERCENT
    };
    STRIDE_ONE * 100 / u64::from(weight.max(1))
}

fn lane_stride(share: u32) -> u64 {
    STRIDE_ONE / u64::from(share.max(1))
}

impl Fair {
    /// Whether the lanes should be read before the next plan: never read, read longer than
    /// [`LANE_REFRESH`] ago, or none left.
    pub fn stale(&self, now: Instant) -> bool {
        match self.read_at {
            None => true,
            Some(at) => self.lanes.is_empty() || now.duration_since(at) >= LANE_REFRESH,
        }
    }

    /// The next plan reads the lanes first (after a wait for new work).
    pub fn forget(&mut self) {
        self.read_at = None;
    }

    /// Takes a fresh read of the lanes at `now` (the ledger's time) and `read_at` (this process's):
    /// those due are kept, each with the pass it had if it was known, else the lowest pass of its
    /// class's known lanes (0 when the class had none: every newcomer then starts level); a class
    /// that had no lanes starts at the other's pass.
    pub fn refresh(&mut self, read: Vec<ReadyLane>, now: Timestamp, read_at: Instant) {
        let had = self.active();
        let mut floor: [Option<u64>; 2] = [None, None];
        for (lane, p) in &self.lanes {
            let c = class(lane.priority);
            floor[c] = Some(floor[c].map_or(p.pass, |f| f.min(p.pass)));
        }
        let mut lanes = BTreeMap::new();
        for r in read.into_iter().filter(|r| r.oldest <= now) {
            let c = class(r.lane.priority);
            let pass = match self.lanes.get(&r.lane) {
                Some(known) => known.pass,
                None => floor[c].unwrap_or(0),
            };
            lanes.insert(
                r.lane,
                LanePass {
                    pass,
                    share: r.share,
                    cap: r.cap_per_second,
                },
            );
        }
        self.lanes = lanes;
        self.read_at = Some(read_at);
        self.level_classes(had);
    }

    /// Which classes have lanes.
    fn active(&self) -> [bool; 2] {
        let mut active = [false, false];
        for lane in self.lanes.keys() {
            active[class(lane.priority)] = true;
        }
        active
    }

    /// A class that just got work starts at the pass of the class that had it: no credit saved.
    fn level_classes(&mut self, had: [bool; 2]) {
        let now = self.active();
        for c in 0..2 {
            let other = 1 - c;
            if now[c] && !had[c] && now[other] {
                self.class_pass[c] = self.class_pass[c].max(self.class_pass[other]);
            }
        }
    }

    /// Whether any lane is known to hold due work.
    pub fn has_work(&self) -> bool {
        !self.lanes.is_empty()
    }

    /// Splits `want` claim slots over the known lanes, one slot at a time by pass; empty when no
    /// lane is known. The passes move on as if every slot were filled ([`Fair::settle`] gives back
    /// what a claim did not fill).
    pub fn plan(&mut self, want: u32) -> Vec<Take> {
        let active = self.active();
        // Each class's lanes in a heap by (pass, position in the lanes' order): one slot costs
        // O(log lanes), so a claim of 128 over 1,000 lanes stays cheap.
        let mut entries: Vec<(&Lane, &mut LanePass, u32)> =
            self.lanes.iter_mut().map(|(l, p)| (l, p, 0)).collect();
        let mut heaps: [BinaryHeap<Reverse<(u64, usize)>>; 2] = Default::default();
        for (i, (lane, p, _)) in entries.iter().enumerate() {
            heaps[class(lane.priority)].push(Reverse((p.pass, i)));
        }
        for _ in 0..want {
            let c = match active {
                [false, false] => break,
                [true, false] => 0,
                [false, true] => 1,
                [true, true] => usize::from(self.class_pass[1] < self.class_pass[0]),
            };
            let Some(Reverse((pass, i))) = heaps[c].pop() else {
                break;
            };
            self.class_pass[c] += class_stride(c);
            let (_, p, n) = &mut entries[i];
            p.pass = pass + lane_stride(p.share);
            *n += 1;
            heaps[c].push(Reverse((p.pass, i)));
        }
        entries
            .into_iter()
            .filter(|(_, _, n)| *n > 0)
            .map(|(lane, _, n)| Take {
                lane: lane.clone(),
                n,
            })
            .collect()
    }

    /// The cap of a planned lane's tenant, if it has one.
    pub fn cap(&self, lane: &Lane) -> Option<u32> {
        self.lanes.get(lane).and_then(|p| p.cap)
    }

    /// A planned lane whose tenant's cap allowed `unfilled` fewer rows than planned: dropped until
    /// the next read, and the passes of those slots given back.
    pub fn hold_back(&mut self, lane: &Lane, unfilled: u32) {
        let c = class(lane.priority);
        self.class_pass[c] =
            self.class_pass[c].saturating_sub(u64::from(unfilled) * class_stride(c));
        self.lanes.remove(lane);
    }

    /// After a claim of `takes` returned `claimed`: the passes of the slots it did not fill are
    /// given back, and a lane that returned nothing is dropped until the next read (one that
    /// returned some but fewer is kept: another claimer's locked rows, skipped, are not an empty
    /// lane; the next claim or read tells).
    pub fn settle(&mut self, takes: &[Take], claimed: &[Operation]) {
        let mut got: HashMap<Lane, u32> = HashMap::new();
        for op in claimed {
            let lane = Lane {
                priority: op.priority,
                tenant: op.tenant.clone(),
            };
            *got.entry(lane).or_default() += 1;
        }
        for take in takes {
            let filled = got.get(&take.lane).copied().unwrap_or(0);
            if filled >= take.n {
                continue;
            }
            if filled == 0 {
                self.hold_back(&take.lane, take.n);
            } else {
                let c = class(take.lane.priority);
                let unfilled = u64::from(take.n - filled);
                self.class_pass[c] = self.class_pass[c].saturating_sub(unfilled * class_stride(c));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use payonce_core::id::TenantId;

    fn lane(priority: Priority, tenant: &str) -> Lane {
        Lane {
            priority,
            tenant: TenantId::parse(tenant).unwrap(),
        }
    }

    fn ready(priority: Priority, tenant: &str, share: u32) -> ReadyLane {
        ReadyLane {
            lane: lane(priority, tenant),
            oldest: Timestamp::from_millis(0),
            share,
            cap_per_second: None,
        }
    }

    fn fair(read: Vec<ReadyLane>) -> Fair {
        let mut f = Fair::default();
        f.refresh(read, Timestamp::from_millis(10), Instant::now());
        f
    }

    /// Slots per lane over `rounds` plans of `want`, every slot filled.
    fn tally(f: &mut Fair, rounds: usize, want: u32) -> BTreeMap<Lane, u32> {
        let mut all = BTreeMap::new();
        for _ in 0..rounds {
            for t in f.plan(want) {
                *all.entry(t.lane).or_default() += t.n;
            }
        }
        all
    }

    #[test]
    fn interactive_takes_its_share_and_bulk_keeps_the_rest() {
        let mut f = fair(vec![
            ready(Priority::Interactive, "b", 100),
            ready(Priority::Bulk, "a", 100),
        ]);
        let all = tally(&mut f, 100, 10);
        let bulk_percent = 100 - BULK_SHARE_PERCENT;
        assert_eq!(all[&lane(Priority::Interactive, "b")], bulk_percent * 10);
        assert_eq!(all[&lane(Priority::Bulk, "a")], BULK_SHARE_PERCENT * 10);
    }

    #[test]
    fn the_first_slot_goes_to_interactive_work_and_a_lone_class_takes_all() {
        let mut f = fair(vec![
            ready(Priority::Bulk, "a", 100),
            ready(Priority::Interactive, "b", 100),
        ]);
        assert_eq!(
            f.plan(1),
            vec![Take {
                lane: lane(Priority::Interactive, "b"),
                n: 1
            }]
        );
        let mut bulk_only = fair(vec![ready(Priority::Bulk, "a", 100)]);
        assert_eq!(
            bulk_only.plan(64),
            vec![Take {
                lane: lane(Priority::Bulk, "a"),
                n: 64
            }]
        );
    }

    #[test]
    fn tenants_take_turns_in_proportion_to_their_shares() {
        let mut f = fair(vec![
            ready(Priority::Bulk, "a", 100),
            ready(Priority::Bulk, "b", 100),
            ready(Priority::Bulk, "c", 300),
        ]);
        let all = tally(&mut f, 50, 10);
        assert_eq!(all[&lane(Priority::Bulk, "a")], 100);
        assert_eq!(all[&lane(Priority::Bulk, "b")], 100);
        assert_eq!(all[&lane(Priority::Bulk, "c")], 300);
    }

    #[test]
    fn a_short_claim_drops_its_lane_and_gives_its_slots_back() {
        let mut f = fair(vec![
            ready(Priority::Interactive, "b", 100),
            ready(Priority::Bulk, "a", 100),
        ]);
        let takes = f.plan(10);
        assert_eq!(takes.len(), 2);
        // Nothing came back from b's lane: dropped; bulk's pass is untouched by b's slots.
        f.settle(&takes, &[]);
        assert!(!f.has_work());
        f.refresh(
            vec![ready(Priority::Bulk, "a", 100)],
            Timestamp::from_millis(10),
            Instant::now(),
        );
        assert_eq!(
            f.plan(5),
            vec![Take {
                lane: lane(Priority::Bulk, "a"),
                n: 5
            }]
        );
    }

    #[test]
    fn a_class_that_comes_back_saves_no_credit() {
        let mut f = fair(vec![ready(Priority::Bulk, "a", 100)]);
        let _ = tally(&mut f, 100, 10);
        // Interactive work arrives after 1,000 bulk slots: it gets its 80 %, not 1,000 in a row.
        f.refresh(
            vec![
                ready(Priority::Bulk, "a", 100),
                ready(Priority::Interactive, "b", 100),
            ],
            Timestamp::from_millis(10),
            Instant::now(),
        );
        let all = tally(&mut f, 10, 10);
        assert_eq!(all[&lane(Priority::Bulk, "a")], 20);
    }

    #[test]
    fn lanes_not_yet_due_are_not_planned() {
        let mut f = Fair::default();
        let mut later = ready(Priority::Bulk, "a", 100);
        later.oldest = Timestamp::from_millis(1_000);
        f.refresh(vec![later], Timestamp::from_millis(999), Instant::now());
        assert!(!f.has_work());
        assert!(f.plan(10).is_empty());
    }
}
