//! The NATS bus (`[bus] kind = "nats"`): the wake-ups travel over a NATS server, so the
//! database carries only the log itself (no `LISTEN` connection, no notices, no
//! follow marks on the turns' rows).
//!
//! Subjects, under the deployment's `nats_subject_prefix`:
//! - `<prefix>.turn.<turn id>`: what a turn's runner committed, each batch as it commits (its
//!   events, or only its newest seq when they would make a message over [`MAX_MESSAGE`]).
//!   Only the instances that follow the turn subscribe, so the server keeps the interest per
//!   turn and drops, for free, the messages of turns nobody follows elsewhere.
//! - `<prefix>.control`: cancels and turn starts, which every instance hears.
//!
//! A message is binary, little-endian (see [`encode`]): a version byte, the sending instance
//! (so an instance skips what it sent itself), then one wake-up. Event bodies travel as the
//! bytes the log stores, so a follower's stream is byte-for-byte the runner's.
//!
//! NATS delivers at most once: whatever it loses (a dropped connection, a slow subscriber, a
//! runner that died between its commit and its publish) is read from the table. A
//! reconnection (or dropped messages) is heard as [`WakeUp::Lost`], which fills every followed
//! feed at once, and `engine/stream/followers.rs` checks every followed turn every two seconds anyway.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_nats::{Client, ConnectOptions, Event, Subscriber};
use async_trait::async_trait;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures_util::StreamExt;
use tokio::sync::{mpsc, Mutex};
use tokio::task::AbortHandle;

use super::contract::{Bus, BusError, Wakeups};
use crate::config::BusConfig;
use crate::redact::redact_url;
use crate::store::{EventKind, Store, StoredEvent, WakeUp};

/// The largest message sent: a batch whose events would make a longer one is announced by its
/// newest seq, and its followers read it from the table.
pub const MAX_MESSAGE: usize = 64 * 1024;
/// How long start-up waits for the NATS server to answer.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an announcement may wait for the client's queue (the server being away, the
/// queue full) before it is given up: followers catch up from the table.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a new subscription waits for the server to confirm it has it.
const ROUND_TRIP_TIMEOUT: Duration = Duration::from_secs(2);
/// Wake-ups heard but not yet handled, before the subscriptions wait.
const HEARD_QUEUE: usize = 1024;
/// The encoding's version, first byte of every message.
const VERSION: u8 = 1;

pub struct NatsBus {
    client: Client,
    prefix: String,
    /// This instance's name on the bus: its messages carry it, and it skips its own.
    instance: Arc<str>,
    /// Where every subscription hands what it hears; [`Bus::listen`] takes the other end.
    heard: mpsc::Sender<Vec<WakeUp>>,
    listening: std::sync::Mutex<Option<Wakeups>>,
    /// The turns followed from here, each with the task forwarding its subscription.
    followed: Mutex<HashMap<i64, AbortHandle>>,
    /// The control subscription's and the connection watcher's tasks.
    tasks: std::sync::Mutex<Vec<AbortHandle>>,
}

impl NatsBus {
    /// Connects to `config.nats_url`; fails when the server does not answer. From then on the
    /// store's batches notify nobody: the log writer announces them here.
    pub async fn connect(config: &BusConfig, store: Arc<dyn Store>) -> Result<NatsBus, BusError> {
        let instance: Arc<str> = uuid::Uuid::new_v4().simple().to_string()[..16].into();
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let client = ConnectOptions::new()
            .name(format!("agui-gateway {instance}"))
            .connection_timeout(CONNECT_TIMEOUT)
            .event_callback(move |event| {
                let events = events_tx.clone();
                async move {
                    let _ = events.send(event);
                }
            })
            .connect(config.nats_url.as_str())
            .await
            .map_err(|error| {
                BusError::Nats(format!("cannot reach the NATS server at {}: {error}", redact_url(&config.nats_url)))
            })?;
        store.set_follower_notices(false);
        let (heard, listening) = mpsc::channel(HEARD_QUEUE);
        let watcher = tokio::spawn(watch_connection(
            client.clone(),
            events_rx,
            heard.clone(),
            config.nats_subject_prefix.clone(),
            instance.clone(),
        ));
        tracing::info!(url = %redact_url(&config.nats_url), prefix = %config.nats_subject_prefix, "the wake-up bus is NATS");
        Ok(NatsBus {
            client,
            prefix: config.nats_subject_prefix.clone(),
            instance,
            heard,
            listening: std::sync::Mutex::new(Some(listening)),
            followed: Mutex::new(HashMap::new()),
            tasks: std::sync::Mutex::new(vec![watcher.abort_handle()]),
        })
    }

    fn turn_subject(&self, turn: i64) -> String {
        format!("{}.turn.{turn}", self.prefix)
    }

    fn control_subject(&self) -> String {
        format!("{}.control", self.prefix)
    }

    async fn publish(&self, subject: String, message: Bytes) -> Result<(), BusError> {
        match tokio::time::timeout(PUBLISH_TIMEOUT, self.client.publish(subject, message)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(BusError::Nats(format!("publishing failed: {error}"))),
            Err(_) => Err(BusError::Nats("publishing timed out: the NATS server is away".into())),
        }
    }
}

impl Drop for NatsBus {
    /// The forwarding tasks hold subscriptions (and so the connection): they end with the bus.
    fn drop(&mut self) {
        for task in self.followed.get_mut().values() {
            task.abort();
        }
        for task in self.tasks.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).iter() {
            task.abort();
        }
    }
}

#[async_trait]
impl Bus for NatsBus {
    fn announces_followed_turns_only(&self) -> bool {
        false
    }

    /// Subscribes to each turn not followed yet, then waits (a bounded while) until the server
    /// has the subscriptions: what the runner commits after that reaches this instance, and the
    /// caller reads the table for what committed before.
    async fn follow(&self, turns: &[i64], _until_ms: i64) -> Result<(), BusError> {
        let mut added = false;
        {
            let mut followed = self.followed.lock().await;
            for &turn in turns {
                if followed.contains_key(&turn) {
                    continue;
                }
                let subscriber = self
                    .client
                    .subscribe(self.turn_subject(turn))
                    .await
                    .map_err(|error| BusError::Nats(format!("subscribing to turn {turn} failed: {error}")))?;
                let task = tokio::spawn(forward(subscriber, self.instance.clone(), self.heard.clone()));
                followed.insert(turn, task.abort_handle());
                added = true;
            }
        }
        if added {
            round_trip(&self.client, &self.prefix, &self.instance).await;
        }
        Ok(())
    }

    async fn unfollow(&self, turns: &[i64]) {
        let mut followed = self.followed.lock().await;
        for turn in turns {
            // Ending the task drops its subscriber, which unsubscribes.
            if let Some(task) = followed.remove(turn) {
                task.abort();
            }
        }
    }

    async fn announce(&self, wakeups: &[WakeUp]) -> Result<(), BusError> {
        for wakeup in wakeups {
            let subject = match wakeup {
                WakeUp::Committed { turn, .. } | WakeUp::Events { turn, .. } => self.turn_subject(*turn),
                WakeUp::Cancel { .. } | WakeUp::NewTurn { .. } | WakeUp::Lost => self.control_subject(),
            };
            self.publish(subject, encode(&self.instance, wakeup)).await?;
        }
        Ok(())
    }

    async fn listen(&self) -> Result<Option<Wakeups>, BusError> {
        let Some(listening) = self.listening.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take() else {
            return Err(BusError::Nats("the bus is listened to once".into()));
        };
        let control = self
            .client
            .subscribe(self.control_subject())
            .await
            .map_err(|error| BusError::Nats(format!("subscribing to the control subject failed: {error}")))?;
        let task = tokio::spawn(forward(control, self.instance.clone(), self.heard.clone()));
        self.tasks.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(task.abort_handle());
        Ok(Some(listening))
    }
}

/// Hands what one subscription hears to the listener, in the order heard, skipping this
/// instance's own messages.
async fn forward(mut subscriber: Subscriber, instance: Arc<str>, heard: mpsc::Sender<Vec<WakeUp>>) {
    while let Some(message) = subscriber.next().await {
        match decode(&message.payload, &instance) {
            Heard::Own => {}
            Heard::Malformed => tracing::warn!(subject = %message.subject, "ignored a malformed message on the bus"),
            Heard::WakeUp(wakeup) => {
                if heard.send(vec![wakeup]).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Follows the connection's events: once the client is connected again after a drop (it
/// subscribes again by itself), or messages were dropped for a slow subscriber, what may have
/// been missed is heard as [`WakeUp::Lost`].
async fn watch_connection(
    client: Client,
    mut events: mpsc::UnboundedReceiver<Event>,
    heard: mpsc::Sender<Vec<WakeUp>>,
    prefix: String,
    instance: Arc<str>,
) {
    let mut disconnected = false;
    while let Some(event) = events.recv().await {
        let lost = match event {
            Event::Disconnected => {
                tracing::warn!("lost the NATS connection; reconnecting (followers read the table meanwhile)");
                disconnected = true;
                false
            }
            Event::Connected if disconnected => {
                tracing::info!("connected to NATS again");
                disconnected = false;
                // The subscriptions are sent again first: once the server has them, read.
                round_trip(&client, &prefix, &instance).await;
                true
            }
            Event::SlowConsumer(_) => {
                tracing::warn!("NATS dropped messages of a subscription that fell behind");
                true
            }
            Event::ServerError(error) => {
                tracing::warn!(%error, "the NATS server reported an error");
                false
            }
            other => {
                tracing::debug!(event = %other, "NATS connection event");
                false
            }
        };
        if lost && heard.send(vec![WakeUp::Lost]).await.is_err() {
            return;
        }
    }
}

/// Waits until the server has handled everything this client sent before (subscriptions
/// included), bounded by [`ROUND_TRIP_TIMEOUT`]: a request nobody answers comes back as "no
/// responders" only after the server processed what preceded it on the connection. Past the
/// bound (the server away) the subscriptions still stand; the reconnection is heard as lost.
async fn round_trip(client: &Client, prefix: &str, instance: &str) {
    let probe = client.request(format!("{prefix}.probe.{instance}"), Bytes::new());
    if tokio::time::timeout(ROUND_TRIP_TIMEOUT, probe).await.is_err() {
        tracing::debug!("the NATS server did not confirm new subscriptions in time");
    }
}

/// What one message told.
#[derive(Debug, PartialEq)]
enum Heard {
    WakeUp(WakeUp),
    /// Sent by this instance.
    Own,
    Malformed,
}

const TAG_EVENTS: u8 = b'E';
const TAG_COMMITTED: u8 = b'C';
const TAG_CANCEL: u8 = b'X';
const TAG_NEW_TURN: u8 = b'N';
const TAG_LOST: u8 = b'L';

/// `VERSION | sender length (u8) | sender | tag | …`, integers little-endian:
/// - `E turn:i64 count:u32 (seq:i64 kind:i16 at_ms:i64 length:u32 body)*`: the events;
/// - `C turn:i64 seq:i64`: committed up to seq (events that would not fit in [`MAX_MESSAGE`]);
/// - `X turn:i64`: cancel; `N thread:i64`: a turn started; `L`: look at everything.
fn encode(instance: &str, wakeup: &WakeUp) -> Bytes {
    let head = |capacity: usize| {
        let mut out = BytesMut::with_capacity(2 + instance.len() + capacity);
        out.put_u8(VERSION);
        out.put_u8(instance.len() as u8);
        out.put_slice(instance.as_bytes());
        out
    };
    let committed = |turn: i64, seq: i64| {
        let mut out = head(17);
        out.put_u8(TAG_COMMITTED);
        out.put_i64_le(turn);
        out.put_i64_le(seq);
        out.freeze()
    };
    match wakeup {
        WakeUp::Events { turn, events } => {
            let seq = events.last().map_or(0, |e| e.seq);
            let size: usize = 13 + events.iter().map(|e| 22 + e.body.len()).sum::<usize>();
            if 2 + instance.len() + size > MAX_MESSAGE || events.len() > u32::MAX as usize {
                return committed(*turn, seq);
            }
            let mut out = head(size);
            out.put_u8(TAG_EVENTS);
            out.put_i64_le(*turn);
            out.put_u32_le(events.len() as u32);
            for event in events {
                out.put_i64_le(event.seq);
                out.put_i16_le(event.kind as i16);
                out.put_i64_le(event.at_ms);
                out.put_u32_le(event.body.len() as u32);
                out.put_slice(&event.body);
            }
            out.freeze()
        }
        WakeUp::Committed { turn, seq } => committed(*turn, *seq),
        WakeUp::Cancel { turn } => {
            let mut out = head(9);
            out.put_u8(TAG_CANCEL);
            out.put_i64_le(*turn);
            out.freeze()
        }
        WakeUp::NewTurn { thread } => {
            let mut out = head(9);
            out.put_u8(TAG_NEW_TURN);
            out.put_i64_le(*thread);
            out.freeze()
        }
        WakeUp::Lost => {
            let mut out = head(1);
            out.put_u8(TAG_LOST);
            out.freeze()
        }
    }
}

/// Reads a message; [`Heard::Own`] for one this instance sent, [`Heard::Malformed`] for one
/// it cannot read whole (another version, cut short, trailing bytes).
fn decode(payload: &Bytes, own_instance: &str) -> Heard {
    let mut reader = Reader(payload.clone());
    match reader.wakeup(own_instance) {
        Some(Heard::WakeUp(_)) if reader.0.has_remaining() => Heard::Malformed,
        Some(heard) => heard,
        None => Heard::Malformed,
    }
}

/// A message read front to back; every read checks that the bytes are there.
struct Reader(Bytes);

impl Reader {
    fn wakeup(&mut self, own_instance: &str) -> Option<Heard> {
        if self.u8()? != VERSION {
            return None;
        }
        let sender_length = self.u8()? as usize;
        let sender = self.bytes(sender_length)?;
        if sender == own_instance.as_bytes() {
            return Some(Heard::Own);
        }
        let wakeup = match self.u8()? {
            TAG_EVENTS => {
                let turn = self.i64()?;
                let count = self.u32()? as usize;
                // Each event takes 22 bytes at least: a count the message cannot hold is a lie.
                if count > self.0.remaining() / 22 {
                    return None;
                }
                let mut events = Vec::with_capacity(count);
                for _ in 0..count {
                    let seq = self.i64()?;
                    let kind = EventKind::from_i16(self.i16()?).ok()?;
                    let at_ms = self.i64()?;
                    let length = self.u32()? as usize;
                    let body = self.bytes(length)?;
                    events.push(StoredEvent { seq, kind, body, at_ms });
                }
                WakeUp::Events { turn, events }
            }
            TAG_COMMITTED => WakeUp::Committed { turn: self.i64()?, seq: self.i64()? },
            TAG_CANCEL => WakeUp::Cancel { turn: self.i64()? },
            TAG_NEW_TURN => WakeUp::NewTurn { thread: self.i64()? },
            TAG_LOST => WakeUp::Lost,
            _ => return None,
        };
        Some(Heard::WakeUp(wakeup))
    }

    fn u8(&mut self) -> Option<u8> {
        (self.0.remaining() >= 1).then(|| self.0.get_u8())
    }

    fn i16(&mut self) -> Option<i16> {
        (self.0.remaining() >= 2).then(|| self.0.get_i16_le())
    }

    fn u32(&mut self) -> Option<u32> {
        (self.0.remaining() >= 4).then(|| self.0.get_u32_le())
    }

    fn i64(&mut self) -> Option<i64> {
        (self.0.remaining() >= 8).then(|| self.0.get_i64_le())
    }

    /// The next `length` bytes, sharing the message's buffer.
    fn bytes(&mut self, length: usize) -> Option<Bytes> {
        (self.0.remaining() >= length).then(|| self.0.split_to(length))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: i64, kind: EventKind, body: &str) -> StoredEvent {
        StoredEvent { seq, kind, body: Bytes::from(body.to_string()), at_ms: 1_700_000_000_000 + seq }
    }

    #[test]
    fn every_wakeup_comes_back_exactly_as_sent() {
        let events = vec![
            event(1, EventKind::RunStarted, r#"{"type":"RUN_STARTED"}"#),
            // Bytes exactly as logged: escapes, non-ASCII text and spacing untouched.
            event(
                2,
                EventKind::Plain,
                "{ \"type\" : \"TEXT_MESSAGE_CONTENT\", \"delta\": \"caf\u{e9} \\u00e9 \\\"q\\\"\" }",
            ),
            event(3, EventKind::RunFinished, r#"{"type":"RUN_FINISHED"}"#),
        ];
        let sent = [
            WakeUp::Events { turn: 42, events },
            WakeUp::Committed { turn: -7, seq: i64::MAX },
            WakeUp::Cancel { turn: 9 },
            WakeUp::NewTurn { thread: 11 },
            WakeUp::Lost,
        ];
        for wakeup in sent {
            assert_eq!(decode(&encode("a1b2", &wakeup), "other"), Heard::WakeUp(wakeup.clone()), "{wakeup:?}");
        }
    }

    #[test]
    fn an_instance_skips_its_own_messages() {
        assert_eq!(decode(&encode("a1b2", &WakeUp::Cancel { turn: 1 }), "a1b2"), Heard::Own);
    }

    #[test]
    fn events_too_big_for_a_message_are_sent_as_their_newest_seq() {
        let body = format!("\"{}\"", "w".repeat(40_000));
        let events = vec![event(5, EventKind::Plain, &body), event(6, EventKind::Plain, &body)];
        let message = encode("a1b2", &WakeUp::Events { turn: 3, events });
        assert!(message.len() <= MAX_MESSAGE);
        assert_eq!(decode(&message, "other"), Heard::WakeUp(WakeUp::Committed { turn: 3, seq: 6 }));
        let fits = vec![event(7, EventKind::Plain, &body)];
        let message = encode("a1b2", &WakeUp::Events { turn: 3, events: fits.clone() });
        assert_eq!(decode(&message, "other"), Heard::WakeUp(WakeUp::Events { turn: 3, events: fits }));
    }

    #[test]
    fn a_message_cut_short_or_padded_or_of_another_version_is_malformed() {
        let whole = encode("a1b2", &WakeUp::Events { turn: 1, events: vec![event(1, EventKind::Plain, "{}")] });
        for cut in 0..whole.len() {
            assert_eq!(decode(&whole.slice(..cut), "other"), Heard::Malformed, "cut at {cut}");
        }
        let mut padded = BytesMut::from(&whole[..]);
        padded.put_u8(0);
        assert_eq!(decode(&padded.freeze(), "other"), Heard::Malformed);
        let mut other_version = BytesMut::from(&whole[..]);
        other_version[0] = VERSION + 1;
        assert_eq!(decode(&other_version.freeze(), "other"), Heard::Malformed);
        // A count of events the message cannot hold.
        let mut lying = BytesMut::from(&encode("a1b2", &WakeUp::Events { turn: 1, events: vec![] })[..]);
        let count_at = lying.len() - 4;
        lying[count_at..].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode(&lying.freeze(), "other"), Heard::Malformed);
    }
}
