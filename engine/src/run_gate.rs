//! Whether a run may act yet: the gate a run's capability carries (`auth::Capability`) and
//! every visible action of the run waits on. Below `auth` and `runs`, which both name it.

use tokio::sync::watch;

/// Whether a run may act yet. The record that a message is answered is the store's trigger
/// claim (`switchboard_store::TriggerStore::claim_trigger`): whether it was claimed before is
/// known when the claim answers, and a run may start while the claim is still being made
/// durable.
///
/// A run may start while its trigger's answered-record is still
/// being written, so that the disk is off the path to the agent's start; everything it does
/// that others can see — its tool calls through its capability, its draft, its reply, its
/// reactions — waits here first. The gate opens once the record is durable; when the record
/// fails (or the opener is dropped unopened), it never opens and the run is stopped, so a
/// message is still answered at most once.
#[derive(Debug, Clone)]
pub struct RunGate(watch::Receiver<bool>);

/// Opens a [`RunGate`]; dropping it unopened shuts the gate for good.
#[derive(Debug)]
pub struct GateOpener(watch::Sender<bool>);

impl RunGate {
    /// A closed gate and what opens it.
    pub fn closed() -> (GateOpener, RunGate) {
        let (sender, receiver) = watch::channel(false);
        (GateOpener(sender), RunGate(receiver))
    }

    /// A gate that is open already (a run with nothing to record).
    pub fn open() -> RunGate {
        let (opener, gate) = RunGate::closed();
        opener.open();
        gate
    }

    /// Waits until the gate opens (true) or is shut (false).
    pub async fn opened(&self) -> bool {
        let mut receiver = self.0.clone();
        let opened = receiver.wait_for(|open| *open).await.is_ok();
        opened
    }
}

impl GateOpener {
    /// Lets the run act.
    pub fn open(self) {
        self.0.send_replace(true);
    }
}

/// Two gates are the same when they watch the same opener (a grant is compared by value).
impl PartialEq for RunGate {
    fn eq(&self, other: &RunGate) -> bool {
        self.0.same_channel(&other.0)
    }
}

impl Eq for RunGate {}
