//! Log lines gathered and written in batches: one system call for many
//! lines instead of one per line (each request writes an access line, and
//! that write cost about as much as the rest of the line).
//!
//! A line at `INFO` or below waits, at most [`GATHER`], for others to join
//! it; a `WARN` or `ERROR` line is written at once, with everything waiting
//! before it, so a problem is on screen when it happens and in order.
//!
//! The writer thread shares the app's cores, so each time it runs it takes
//! one from a request: under load it wakes once a batch, on its own timer,
//! and the threads adding lines wake it only when it sleeps with nothing
//! to write (waking a thread that is not waiting still costs a system call).
//! Lines are never dropped: a thread that finds [`LIMIT`] bytes waiting
//! writes them itself. [`flush`](Buffered::flush) writes what waits, and
//! the server calls it as it stops.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tracing::{Level, Metadata};
use tracing_subscriber::fmt::MakeWriter;

/// How long a line may wait for others: long enough that under load the
/// writer thread runs a hundred times a second rather than a thousand,
/// short enough that no one reading the log sees the delay.
pub(crate) const GATHER: Duration = Duration::from_millis(10);

/// Bytes waiting at which the thread adding a line writes them all.
const LIMIT: usize = 64 * 1024;

/// Lines waiting to be written to `W`.
pub(crate) struct Buffered<W> {
    /// The output, with an empty buffer of the same capacity to swap in.
    /// Taken before `waiting` by whoever writes, so batches leave in order.
    out: Mutex<(W, Vec<u8>)>,
    waiting: Mutex<Waiting>,
    /// Signalled when the first line joins an empty batch while the writer
    /// thread waits for one.
    arrived: Condvar,
    gather: Duration,
    /// Whether the writer thread runs; without it every line is written as
    /// it comes.
    batching: AtomicBool,
    /// How often a line woke the writer thread (a relaxed count, read by
    /// the tests: wake-ups are rare, so counting them costs nothing).
    wakeups: AtomicUsize,
}

/// The batch being gathered.
struct Waiting {
    lines: Vec<u8>,
    /// Whether the writer thread waits on `arrived` for a first line.
    writer_idle: bool,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding either leaves bytes, never a broken invariant.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<W: Write + Send + 'static> Buffered<W> {
    /// Lines to `out`, written by a thread of their own every `gather`.
    pub(crate) fn start(out: W, gather: Duration) -> Arc<Self> {
        let buffered = Arc::new(Self {
            out: Mutex::new((out, Vec::with_capacity(LIMIT))),
            waiting: Mutex::new(Waiting {
                lines: Vec::with_capacity(LIMIT),
                writer_idle: false,
            }),
            arrived: Condvar::new(),
            gather,
            batching: AtomicBool::new(true),
            wakeups: AtomicUsize::new(0),
        });
        let writer = Arc::clone(&buffered);
        let spawned = std::thread::Builder::new()
            .name("autumn-log".to_owned())
            .spawn(move || writer.write_batches());
        if spawned.is_err() {
            buffered.batching.store(false, Ordering::Relaxed);
        }
        buffered
    }

    /// The writer thread: waits for a first line, lets others join it for
    /// `gather`, writes them all; never ends (the process ends it). Lines
    /// that arrived while it wrote start the next batch without a wake-up.
    fn write_batches(&self) {
        loop {
            let mut waiting = lock(&self.waiting);
            if waiting.lines.is_empty() {
                waiting.writer_idle = true;
                while waiting.lines.is_empty() {
                    waiting = self
                        .arrived
                        .wait(waiting)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                waiting.writer_idle = false;
            }
            drop(waiting);
            std::thread::sleep(self.gather);
            self.flush();
        }
    }

    /// Adds `line`; writes it, and all before it, at once when `urgent`.
    fn add(&self, line: &[u8], urgent: bool) {
        if urgent || !self.batching.load(Ordering::Relaxed) {
            self.write_with(line);
            return;
        }
        let mut waiting = lock(&self.waiting);
        if waiting.lines.len() + line.len() > LIMIT {
            drop(waiting);
            self.write_with(line);
            return;
        }
        // Read under the lock the writer set it under, so no wake-up is lost.
        let wake = waiting.lines.is_empty() && waiting.writer_idle;
        waiting.lines.extend_from_slice(line);
        drop(waiting);
        if wake {
            self.wakeups.fetch_add(1, Ordering::Relaxed);
            self.arrived.notify_one();
        }
    }

    /// Writes every line waiting.
    pub(crate) fn flush(&self) {
        self.write_with(&[]);
    }

    /// Writes every line waiting, then `line`.
    fn write_with(&self, line: &[u8]) {
        let mut out = lock(&self.out);
        let (out, batch) = &mut *out;
        std::mem::swap(batch, &mut lock(&self.waiting).lines);
        batch.extend_from_slice(line);
        if !batch.is_empty() {
            // A log that cannot be written (a closed pipe) is not the
            // request's failure: as `tracing-subscriber` does, go on.
            let _ = out.write_all(batch).and_then(|()| out.flush());
            batch.clear();
        }
    }
}

/// [`Buffered`] as a subscriber's writer.
pub(crate) struct BufferedWriter<W>(pub(crate) Arc<Buffered<W>>);

/// One line on its way into [`Buffered`].
pub(crate) struct Line<'a, W> {
    to: &'a Buffered<W>,
    urgent: bool,
}

impl<W: Write + Send + 'static> Write for Line<'_, W> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.to.add(bytes, self.urgent);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a, W: Write + Send + 'static> MakeWriter<'a> for BufferedWriter<W> {
    type Writer = Line<'a, W>;

    fn make_writer(&'a self) -> Self::Writer {
        Line {
            to: &self.0,
            urgent: false,
        }
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> Self::Writer {
        Line {
            to: &self.0,
            // More severe levels compare lower.
            urgent: *meta.level() <= Level::WARN,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::captured::Captured;
    use super::*;

    /// Never written by the thread within a test: only `flush`, an urgent
    /// line or the limit write.
    const NEVER: Duration = Duration::from_secs(3600);

    fn info<W: Write + Send + 'static>(to: &BufferedWriter<W>, line: &str) {
        to.make_writer()
            .write_all(line.as_bytes())
            .expect("written");
    }

    /// Waits, bounded, for `done`, which the writer thread brings about.
    fn eventually(what: &str, done: impl FnMut() -> bool) {
        autumn_testkit::eventually(what, Duration::from_secs(10), done);
    }

    #[test]
    fn lines_wait_until_flushed_and_then_leave_in_order() {
        let captured = Captured::default();
        let writer = BufferedWriter(Buffered::start(captured.clone(), NEVER));
        info(&writer, "one\n");
        info(&writer, "two\n");
        assert_eq!(captured.text(), "", "waiting for the batch");
        writer.0.flush();
        assert_eq!(captured.text(), "one\ntwo\n");
    }

    #[test]
    fn a_warning_is_written_at_once_after_the_lines_before_it() {
        let captured = Captured::default();
        let writer = BufferedWriter(Buffered::start(captured.clone(), NEVER));
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .without_time()
            .with_target(false)
            .with_writer(BufferedWriter(Arc::clone(&writer.0)))
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!("before");
            assert_eq!(captured.text(), "", "an info line waits");
            tracing::warn!("careful");
        });
        assert_eq!(captured.text(), " INFO before\n WARN careful\n");
    }

    #[test]
    fn past_the_limit_the_adding_thread_writes_the_batch() {
        let captured = Captured::default();
        let writer = BufferedWriter(Buffered::start(captured.clone(), NEVER));
        let line = format!("{}\n", "x".repeat(1023));
        for _ in 0..LIMIT / line.len() {
            info(&writer, &line);
        }
        assert_eq!(captured.text(), "", "exactly at the limit: still waiting");
        info(&writer, "over\n");
        let text = captured.text();
        assert_eq!(text.len(), LIMIT + "over\n".len());
        assert!(text.ends_with("x\nover\n"));
    }

    #[test]
    fn the_thread_writes_a_batch_soon_after_its_first_line() {
        let captured = Captured::default();
        let writer = BufferedWriter(Buffered::start(captured.clone(), Duration::ZERO));
        info(&writer, "soon\n");
        // The thread's doing, not ours: wait for it (bounded).
        eventually("the thread writes the line", || !captured.text().is_empty());
        assert_eq!(captured.text(), "soon\n");
    }

    /// Keeps what is written once let through; says when a write began.
    #[derive(Clone, Default)]
    struct Gated {
        captured: Captured,
        writing: Arc<AtomicBool>,
        open: Arc<AtomicBool>,
    }

    impl Write for Gated {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.writing.store(true, Ordering::SeqCst);
            while !self.open.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            self.captured.write(bytes)
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn only_a_line_for_an_idle_writer_wakes_it() {
        let gated = Gated::default();
        let buffered = Buffered::start(gated.clone(), Duration::from_millis(1));
        let writer = BufferedWriter(Arc::clone(&buffered));
        let idle = || lock(&buffered.waiting).writer_idle;
        let wakeups = || buffered.wakeups.load(Ordering::SeqCst);
        eventually("the writer waits for a first line", idle);
        info(&writer, "first\n");
        assert_eq!(wakeups(), 1, "an idle writer is woken");
        // The writer is busy writing the batch, which it took away: a line
        // now starts the next batch, and the writer finds it when done.
        eventually("the writer writes", || gated.writing.load(Ordering::SeqCst));
        info(&writer, "second\n");
        assert_eq!(wakeups(), 1, "a busy writer is not woken");
        gated.open.store(true, Ordering::SeqCst);
        eventually("both lines are written", || {
            gated.captured.text() == "first\nsecond\n"
        });
        eventually("the writer waits again", idle);
        info(&writer, "third\n");
        assert_eq!(wakeups(), 2);
        eventually("the third line is written", || {
            gated.captured.text() == "first\nsecond\nthird\n"
        });
    }

    #[test]
    fn lines_from_many_threads_arrive_whole() {
        let captured = Captured::default();
        let writer = Arc::new(BufferedWriter(Buffered::start(
            captured.clone(),
            Duration::from_micros(50),
        )));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let writer = Arc::clone(&writer);
                std::thread::spawn(move || {
                    for n in 0..2000 {
                        info(
                            &writer,
                            &format!("thread {t} line {n} {}\n", "y".repeat(n % 97)),
                        );
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("no panic");
        }
        writer.0.flush();
        let text = captured.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 8000);
        for t in 0..4 {
            let mine: Vec<usize> = lines
                .iter()
                .filter_map(|line| line.strip_prefix(&format!("thread {t} line ")))
                .map(|rest| {
                    let (n, ys) = rest.split_once(' ').expect("whole line");
                    let n: usize = n.parse().expect("a number");
                    assert_eq!(ys, "y".repeat(n % 97), "line {n} of thread {t} is whole");
                    n
                })
                .collect();
            assert_eq!(
                mine,
                (0..2000).collect::<Vec<_>>(),
                "thread {t}'s lines in order"
            );
        }
    }
}
