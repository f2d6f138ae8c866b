//! Task lifecycle (`lifecycle { hook, sidecar }`): when each task of an allocation may start,
//! and in which order the tasks are stopped.
//!
//! The start order is Nomad's `client/allocrunner/tasklifecycle.Coordinator`, an FSM over the
//! tasks' states: init (all pending) -> prestart (prestart tasks may run) -> main (every
//! ephemeral prestart task completed successfully, every prestart sidecar runs) -> poststart
//! (no main task is pending any more) -> wait_alloc (every ephemeral poststart task is dead)
//! -> poststop (every task but the poststop ones is dead; reachable from any state). Each
//! state opens or closes one gate per lifecycle stage, exactly as Nomad's `enterStateLocked`.
//!
//! The stop order is Nomad's `allocRunner.killTasks`: the leader first, then the other tasks
//! but sidecars and poststop tasks, then the sidecars; poststop tasks are never killed, they
//! run once the others are dead.

use std::collections::{BTreeMap, VecDeque};

use drover_structs::{TASK_STATE_DEAD, TASK_STATE_PENDING, TASK_STATE_RUNNING, Task, TaskState};
use tokio::sync::watch;

use crate::task_runner::{KillReason, TaskRunner};

pub const HOOK_PRESTART: &str = "prestart";
pub const HOOK_POSTSTART: &str = "poststart";
pub const HOOK_POSTSTOP: &str = "poststop";

/// Nomad's `lifecycleStage`: what coordinates a task's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    PrestartEphemeral,
    PrestartSidecar,
    Main,
    PoststartEphemeral,
    PoststartSidecar,
    Poststop,
}

/// The task's `lifecycle` block as the client reads it: its hook and sidecar flag.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lifecycle {
    pub hook: String,
    pub sidecar: bool,
}

impl Lifecycle {
    /// Reads the task's `Lifecycle` (API JSON: `{"Hook": .., "Sidecar": ..}`). A block without
    /// a hook is no lifecycle, as Nomad's API drops it (`TaskLifecycle.Empty`).
    pub fn of(task: &Task) -> Option<Lifecycle> {
        let l = task.lifecycle.as_ref()?;
        let hook = l.get("Hook").and_then(|h| h.as_str()).unwrap_or("");
        if hook.is_empty() {
            return None;
        }
        Some(Lifecycle {
            hook: hook.to_string(),
            sidecar: l.get("Sidecar").and_then(|s| s.as_bool()).unwrap_or(false),
        })
    }
}

/// Nomad's `taskLifecycleStage`. An unknown hook (refused at registration) counts as main.
pub fn stage_of(task: &Task) -> Stage {
    match Lifecycle::of(task) {
        Some(l) if l.hook == HOOK_PRESTART && l.sidecar => Stage::PrestartSidecar,
        Some(l) if l.hook == HOOK_PRESTART => Stage::PrestartEphemeral,
        Some(l) if l.hook == HOOK_POSTSTART && l.sidecar => Stage::PoststartSidecar,
        Some(l) if l.hook == HOOK_POSTSTART => Stage::PoststartEphemeral,
        Some(l) if l.hook == HOOK_POSTSTOP => Stage::Poststop,
        _ => Stage::Main,
    }
}

/// Nomad's `NewRestartTracker`: whether a task that exits successfully is started again.
/// Batch-like jobs do not; a prestart or poststart task only as a sidecar; poststop never.
pub fn restarts_on_success(task: &Task, batch_like_job: bool) -> bool {
    match Lifecycle::of(task) {
        Some(l) if l.hook == HOOK_PRESTART || l.hook == HOOK_POSTSTART => l.sidecar,
        Some(l) if l.hook == HOOK_POSTSTOP => false,
        _ => !batch_like_job,
    }
}

/// Nomad's `TaskRunner.IsSidecarTask`: a lifecycle block with `sidecar = true`.
pub fn is_sidecar(task: &Task) -> bool {
    Lifecycle::of(task).is_some_and(|l| l.sidecar)
}

pub fn is_poststop(task: &Task) -> bool {
    stage_of(task) == Stage::Poststop
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoordinatorState {
    Init,
    Prestart,
    Main,
    Poststart,
    WaitAlloc,
    Poststop,
}

/// Decides which lifecycle stages may start; each stage's gate is a `watch` of "open".
pub struct Coordinator {
    by_stage: BTreeMap<Stage, Vec<String>>,
    state: CoordinatorState,
    gates: BTreeMap<Stage, watch::Sender<bool>>,
}

fn successful(s: Option<&TaskState>) -> bool {
    s.is_some_and(|s| s.state == TASK_STATE_DEAD && !s.failed)
}

fn in_state(s: Option<&TaskState>, state: &str) -> bool {
    s.is_some_and(|s| s.state == state)
}

impl Coordinator {
    /// Every stage starts closed (Nomad's `NewCoordinator`).
    pub fn new(tasks: &[Task]) -> Coordinator {
        let mut by_stage: BTreeMap<Stage, Vec<String>> = BTreeMap::new();
        for t in tasks {
            by_stage
                .entry(stage_of(t))
                .or_default()
                .push(t.name.clone());
        }
        let gates = by_stage
            .keys()
            .map(|stage| (*stage, watch::channel(false).0))
            .collect();
        let mut c = Coordinator {
            by_stage,
            state: CoordinatorState::Init,
            gates,
        };
        c.enter(CoordinatorState::Init);
        c
    }

    /// After an agent restart the tasks may already run: skip "init" (Nomad's `Restore`).
    pub fn restore(&mut self, states: &BTreeMap<String, TaskState>) {
        self.enter(CoordinatorState::Prestart);
        self.task_states_updated(states);
    }

    pub fn state(&self) -> CoordinatorState {
        self.state
    }

    /// The gate of a stage: `true` while tasks of that stage may start.
    pub fn gate(&self, stage: Stage) -> watch::Receiver<bool> {
        match self.gates.get(&stage) {
            Some(g) => g.subscribe(),
            // A stage without tasks: nobody waits on it; closed.
            None => watch::channel(false).1,
        }
    }

    pub fn is_open(&self, stage: Stage) -> bool {
        self.gates.get(&stage).is_some_and(|g| *g.borrow())
    }

    /// Moves the FSM as far as the tasks' states allow (Nomad's `TaskStateUpdated`).
    pub fn task_states_updated(&mut self, states: &BTreeMap<String, TaskState>) {
        loop {
            let next = self.next_state(states);
            if next == self.state {
                return;
            }
            self.enter(next);
        }
    }

    fn tasks(&self, stage: Stage) -> &[String] {
        self.by_stage.get(&stage).map(Vec::as_slice).unwrap_or(&[])
    }

    fn next_state(&self, states: &BTreeMap<String, TaskState>) -> CoordinatorState {
        use CoordinatorState as S;
        if self.is_alloc_done(states) {
            return S::Poststop;
        }
        match self.state {
            S::Init if self.is_init_done(states) => S::Prestart,
            S::Prestart if self.is_prestart_done(states) => S::Main,
            S::Main if self.is_main_done(states) => S::Poststart,
            S::Poststart if self.is_poststart_done(states) => S::WaitAlloc,
            other => other,
        }
    }

    fn is_init_done(&self, states: &BTreeMap<String, TaskState>) -> bool {
        states.values().all(|s| s.state == TASK_STATE_PENDING)
    }

    fn is_prestart_done(&self, states: &BTreeMap<String, TaskState>) -> bool {
        self.tasks(Stage::PrestartEphemeral)
            .iter()
            .all(|t| successful(states.get(t)))
            && self
                .tasks(Stage::PrestartSidecar)
                .iter()
                .all(|t| in_state(states.get(t), TASK_STATE_RUNNING))
    }

    fn is_main_done(&self, states: &BTreeMap<String, TaskState>) -> bool {
        self.tasks(Stage::Main)
            .iter()
            .all(|t| !in_state(states.get(t), TASK_STATE_PENDING))
    }

    fn is_poststart_done(&self, states: &BTreeMap<String, TaskState>) -> bool {
        self.tasks(Stage::PoststartEphemeral)
            .iter()
            .all(|t| in_state(states.get(t), TASK_STATE_DEAD))
    }

    fn is_alloc_done(&self, states: &BTreeMap<String, TaskState>) -> bool {
        self.by_stage
            .iter()
            .filter(|(stage, _)| **stage != Stage::Poststop)
            .flat_map(|(_, tasks)| tasks)
            .all(|t| in_state(states.get(t), TASK_STATE_DEAD))
    }

    fn set(&self, stage: Stage, open: bool) {
        if let Some(g) = self.gates.get(&stage) {
            g.send_if_modified(|v| std::mem::replace(v, open) != open);
        }
    }

    fn enter(&mut self, state: CoordinatorState) {
        use CoordinatorState as S;
        use Stage::*;
        let open: &[Stage] = match state {
            S::Init => &[],
            S::Prestart => &[PrestartEphemeral, PrestartSidecar],
            S::Main => &[PrestartSidecar, Main],
            S::Poststart => &[PrestartSidecar, Main, PoststartEphemeral, PoststartSidecar],
            S::WaitAlloc => &[PrestartSidecar, Main, PoststartSidecar],
            S::Poststop => &[Poststop],
        };
        for stage in [
            PrestartEphemeral,
            PrestartSidecar,
            Main,
            PoststartEphemeral,
            PoststartSidecar,
            Poststop,
        ] {
            self.set(stage, open.contains(&stage));
        }
        self.state = state;
    }
}

/// Nomad's `killTasks` order: the leader alone, then every other task but sidecars and
/// poststop tasks, then the sidecars. Empty phases are left out.
pub fn kill_phases(tasks: &[Task]) -> Vec<Vec<String>> {
    let leader: Vec<String> = tasks
        .iter()
        .filter(|t| t.leader)
        .take(1)
        .map(|t| t.name.clone())
        .collect();
    let others = tasks
        .iter()
        .filter(|t| !leader.contains(&t.name) && !is_poststop(t) && !is_sidecar(t))
        .map(|t| t.name.clone())
        .collect();
    let sidecars = tasks
        .iter()
        .filter(|t| !leader.contains(&t.name) && !is_poststop(t) && is_sidecar(t))
        .map(|t| t.name.clone())
        .collect();
    [leader, others, sidecars]
        .into_iter()
        .filter(|p: &Vec<String>| !p.is_empty())
        .collect()
}

/// Nomad's "only sidecars remaining" check: the group has sidecars, some non-poststop task
/// still lives, and every one of those is a sidecar.
pub fn only_sidecars_remain(tasks: &[Task], states: &BTreeMap<String, TaskState>) -> bool {
    if !tasks.iter().any(is_sidecar) {
        return false;
    }
    let mut live = tasks
        .iter()
        .filter(|t| !is_poststop(t))
        .filter(|t| !in_state(states.get(&t.name), TASK_STATE_DEAD))
        .peekable();
    live.peek().is_some() && live.all(is_sidecar)
}

/// Runs the task once its stage's gate opens (`None`: at once), or at once when it is killed
/// before that (the runner then ends it without starting it).
pub async fn run_when_allowed(
    runner: Box<TaskRunner>,
    gate: Option<watch::Receiver<bool>>,
    kill: watch::Receiver<Option<KillReason>>,
) {
    if let Some(mut gate) = gate {
        let mut killed = kill.clone();
        tokio::select! {
            // A closed gate channel means the allocation runner is gone: nothing will open
            // it; the runner's kill channel decides from here.
            _ = gate.wait_for(|open| *open) => {}
            _ = killed.wait_for(|k| k.is_some()) => {}
        }
    }
    runner.run(kill).await;
}

/// Nomad's `handleTaskStateUpdates`: whether the tasks' states call for killing the others.
/// Poststop tasks neither trigger it nor count as live. A dead leader comes before a failed
/// task; without either, only sidecars left alive are stopped ("Main Tasks Dead").
pub fn kill_reason(tasks: &[Task], states: &BTreeMap<String, TaskState>) -> Option<KillReason> {
    let mut reason = None;
    let mut live = false;
    for t in tasks.iter().filter(|t| !is_poststop(t)) {
        let Some(s) = states.get(&t.name).filter(|s| s.state == TASK_STATE_DEAD) else {
            live = true;
            continue;
        };
        if s.failed {
            if reason.is_none() {
                reason = Some(KillReason::SiblingFailed(t.name.clone()));
            }
        } else if t.leader {
            reason = Some(KillReason::LeaderDead);
        }
    }
    if !live {
        return None;
    }
    if reason.is_none() && only_sidecars_remain(tasks, states) {
        reason = Some(KillReason::MainDead);
    }
    reason
}

/// A kill in progress: the phases of [`kill_phases`] sent one after another, each once every
/// task of the one before is dead; the first one after the group's `shutdown_delay` (Nomad's
/// group service hook waits for it in `PreKill`, before any task is killed).
#[derive(Debug, Default)]
pub struct Killing {
    reason: Option<KillReason>,
    phases: VecDeque<Vec<String>>,
    current: Vec<String>,
    not_before: Option<tokio::time::Instant>,
}

impl Killing {
    /// Starts a kill of the group's live tasks, the first phase after `delay`.
    pub fn after(
        tasks: &[Task],
        states: &BTreeMap<String, TaskState>,
        reason: KillReason,
        delay: std::time::Duration,
    ) -> Self {
        let mut k = Killing::start(tasks, states, reason);
        if !delay.is_zero() {
            k.not_before = Some(tokio::time::Instant::now() + delay);
        }
        k
    }

    /// Until when the group's shutdown delay holds the kill back, while it does.
    pub fn delayed_until(&self) -> Option<tokio::time::Instant> {
        self.not_before
            .filter(|t| *t > tokio::time::Instant::now() && !self.phases.is_empty())
    }

    pub fn start(tasks: &[Task], states: &BTreeMap<String, TaskState>, reason: KillReason) -> Self {
        let alive = |n: &String| !in_state(states.get(n), TASK_STATE_DEAD);
        let phases = kill_phases(tasks)
            .into_iter()
            .map(|p| p.into_iter().filter(alive).collect::<Vec<_>>())
            .filter(|p| !p.is_empty())
            .collect();
        Killing {
            reason: Some(reason),
            phases,
            current: Vec::new(),
            not_before: None,
        }
    }

    /// Sends the next phases whose predecessors are all dead.
    pub fn advance(
        &mut self,
        states: &BTreeMap<String, TaskState>,
        kills: &BTreeMap<String, watch::Sender<Option<KillReason>>>,
    ) {
        let Some(reason) = &self.reason else {
            return;
        };
        if self.delayed_until().is_some() {
            return;
        }
        loop {
            let done = self
                .current
                .iter()
                .all(|n| in_state(states.get(n), TASK_STATE_DEAD) || !kills.contains_key(n));
            if !done {
                return;
            }
            let Some(next) = self.phases.pop_front() else {
                return;
            };
            for name in &next {
                if let Some(tx) = kills.get(name) {
                    tx.send_if_modified(|k| {
                        let first = k.is_none();
                        if first {
                            *k = Some(reason.clone());
                        }
                        first
                    });
                }
            }
            self.current = next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn task(name: &str, hook: Option<&str>, sidecar: bool) -> Task {
        Task {
            name: name.into(),
            lifecycle: hook.map(|h| json!({"Hook": h, "Sidecar": sidecar})),
            ..Default::default()
        }
    }

    fn st(state: &str, failed: bool) -> TaskState {
        TaskState {
            state: state.into(),
            failed,
            ..Default::default()
        }
    }

    fn states(v: &[(&str, &str, bool)]) -> BTreeMap<String, TaskState> {
        v.iter()
            .map(|(n, s, f)| (n.to_string(), st(s, *f)))
            .collect()
    }

    fn group() -> Vec<Task> {
        vec![
            task("init", Some("prestart"), false),
            task("proxy", Some("prestart"), true),
            task("main", None, false),
            task("after", Some("poststart"), false),
            task("cleanup", Some("poststop"), false),
        ]
    }

    const P: &str = TASK_STATE_PENDING;
    const R: &str = TASK_STATE_RUNNING;
    const D: &str = TASK_STATE_DEAD;

    #[test]
    fn stages_follow_hook_and_sidecar() {
        let g = group();
        let stages: Vec<Stage> = g.iter().map(stage_of).collect();
        assert_eq!(
            stages,
            vec![
                Stage::PrestartEphemeral,
                Stage::PrestartSidecar,
                Stage::Main,
                Stage::PoststartEphemeral,
                Stage::Poststop
            ]
        );
        let hookless = Task {
            lifecycle: Some(json!({"Hook": "", "Sidecar": true})),
            ..Default::default()
        };
        assert_eq!(stage_of(&hookless), Stage::Main);
        assert!(
            !is_sidecar(&hookless),
            "a block without hook is no lifecycle"
        );
    }

    #[test]
    fn only_main_tasks_and_sidecars_of_a_service_restart_after_success() {
        let [init, proxy, main, after, cleanup] = group().try_into().expect("five tasks");
        assert!(!restarts_on_success(&init, false));
        assert!(restarts_on_success(&proxy, false));
        assert!(
            restarts_on_success(&proxy, true),
            "a sidecar of a batch job too"
        );
        assert!(restarts_on_success(&main, false));
        assert!(!restarts_on_success(&main, true));
        assert!(!restarts_on_success(&after, false));
        assert!(restarts_on_success(
            &task("s", Some("poststart"), true),
            false
        ));
        assert!(!restarts_on_success(&cleanup, false));
    }

    #[test]
    fn only_prestart_tasks_may_start_first() {
        let mut c = Coordinator::new(&group());
        assert!(!c.is_open(Stage::PrestartEphemeral), "init: all closed");
        c.task_states_updated(&states(&[
            ("init", P, false),
            ("proxy", P, false),
            ("main", P, false),
            ("after", P, false),
            ("cleanup", P, false),
        ]));
        assert_eq!(c.state(), CoordinatorState::Prestart);
        assert!(c.is_open(Stage::PrestartEphemeral) && c.is_open(Stage::PrestartSidecar));
        assert!(!c.is_open(Stage::Main) && !c.is_open(Stage::Poststop));
    }

    #[test]
    fn main_tasks_wait_for_ephemeral_prestart_success_and_running_sidecars() {
        let mut c = Coordinator::new(&group());
        c.task_states_updated(&states(&[("init", P, false), ("proxy", P, false)]));
        // The sidecar runs but init still runs: main stays closed.
        c.task_states_updated(&states(&[
            ("init", R, false),
            ("proxy", R, false),
            ("main", P, false),
        ]));
        assert!(!c.is_open(Stage::Main));
        // init completed but the sidecar is not running (restarting): still closed.
        c.task_states_updated(&states(&[
            ("init", D, false),
            ("proxy", P, false),
            ("main", P, false),
        ]));
        assert!(!c.is_open(Stage::Main));
        c.task_states_updated(&states(&[
            ("init", D, false),
            ("proxy", R, false),
            ("main", P, false),
            ("after", P, false),
            ("cleanup", P, false),
        ]));
        assert_eq!(c.state(), CoordinatorState::Main);
        assert!(c.is_open(Stage::Main) && c.is_open(Stage::PrestartSidecar));
        assert!(
            !c.is_open(Stage::PrestartEphemeral),
            "no second run of init"
        );
        assert!(!c.is_open(Stage::PoststartEphemeral));
    }

    #[test]
    fn a_failed_prestart_task_never_opens_main() {
        let mut c = Coordinator::new(&group());
        c.task_states_updated(&states(&[("init", P, false)]));
        c.task_states_updated(&states(&[
            ("init", D, true),
            ("proxy", R, false),
            ("main", P, false),
            ("after", P, false),
            ("cleanup", P, false),
        ]));
        assert_eq!(c.state(), CoordinatorState::Prestart);
        assert!(!c.is_open(Stage::Main));
    }

    #[test]
    fn poststart_opens_once_main_tasks_left_pending_and_poststop_once_all_others_are_dead() {
        let mut c = Coordinator::new(&group());
        c.task_states_updated(&states(&[("init", P, false)]));
        let mut s = states(&[
            ("init", D, false),
            ("proxy", R, false),
            ("main", R, false),
            ("after", P, false),
            ("cleanup", P, false),
        ]);
        c.task_states_updated(&s);
        assert_eq!(c.state(), CoordinatorState::Poststart);
        assert!(c.is_open(Stage::PoststartEphemeral) && c.is_open(Stage::Main));
        s.insert("after".into(), st(D, false));
        c.task_states_updated(&s);
        assert_eq!(c.state(), CoordinatorState::WaitAlloc);
        assert!(!c.is_open(Stage::PoststartEphemeral) && !c.is_open(Stage::Poststop));
        s.insert("main".into(), st(D, false));
        c.task_states_updated(&s);
        assert!(!c.is_open(Stage::Poststop), "the sidecar still runs");
        s.insert("proxy".into(), st(D, false));
        c.task_states_updated(&s);
        assert_eq!(c.state(), CoordinatorState::Poststop);
        assert!(c.is_open(Stage::Poststop));
        assert!(!c.is_open(Stage::Main) && !c.is_open(Stage::PrestartSidecar));
    }

    #[test]
    fn poststop_opens_after_a_failure_killed_everything_else() {
        let mut c = Coordinator::new(&group());
        c.task_states_updated(&states(&[("init", P, false)]));
        c.task_states_updated(&states(&[
            ("init", D, true),
            ("proxy", D, false),
            ("main", D, false),
            ("after", D, false),
            ("cleanup", P, false),
        ]));
        assert_eq!(c.state(), CoordinatorState::Poststop);
        assert!(c.is_open(Stage::Poststop));
    }

    #[test]
    fn a_group_without_lifecycle_opens_main_at_once() {
        let tasks = vec![task("a", None, false), task("b", None, false)];
        let mut c = Coordinator::new(&tasks);
        c.task_states_updated(&states(&[("a", P, false), ("b", P, false)]));
        assert!(c.is_open(Stage::Main));
    }

    #[test]
    fn restore_finds_the_state_of_running_tasks() {
        let mut c = Coordinator::new(&group());
        c.restore(&states(&[
            ("init", D, false),
            ("proxy", R, false),
            ("main", R, false),
            ("after", D, false),
            ("cleanup", P, false),
        ]));
        assert_eq!(c.state(), CoordinatorState::WaitAlloc);
        assert!(c.is_open(Stage::Main) && !c.is_open(Stage::Poststop));
    }

    #[test]
    fn tasks_are_killed_leader_first_then_main_then_sidecars_never_poststop() {
        let mut g = group();
        g.push(Task {
            name: "boss".into(),
            leader: true,
            ..Default::default()
        });
        g.push(task("logs", Some("poststart"), true));
        assert_eq!(
            kill_phases(&g),
            vec![
                vec!["boss".to_string()],
                vec!["init".into(), "main".into(), "after".into()],
                vec!["proxy".into(), "logs".into()],
            ]
        );
        assert_eq!(
            kill_phases(&[task("m", None, false)]),
            vec![vec!["m".to_string()]]
        );
    }

    #[test]
    fn only_sidecars_remain_once_main_tasks_died() {
        let g = group();
        let mut s = states(&[
            ("init", D, false),
            ("proxy", R, false),
            ("main", R, false),
            ("after", D, false),
            ("cleanup", P, false),
        ]);
        assert!(!only_sidecars_remain(&g, &s));
        s.insert("main".into(), st(D, false));
        assert!(
            only_sidecars_remain(&g, &s),
            "the poststop task does not count"
        );
        s.insert("proxy".into(), st(D, false));
        assert!(!only_sidecars_remain(&g, &s), "nothing lives");
        let plain = vec![task("a", None, false)];
        assert!(!only_sidecars_remain(&plain, &states(&[("a", R, false)])));
    }
}

#[cfg(test)]
#[path = "lifecycle_runner_tests.rs"]
pub(crate) mod runner_tests;
