//! The client host an NLM test plays, for the calls granary makes to it (GRANTED, the
//! `_RES` answers, SM_NOTIFY): its portmapper, NLM and NSM on one port, which the server
//! is pointed at with `--callback-portmap-port`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use nlm::nlm4::{Proc, Res, Stats, TestArgs};
use rpc::dispatch::{CacheClass, ProcError, Program};
use rpc::{CallContext, Dispatcher};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use xdr::{Decode, Decoder, Encode, Encoder};

pub const NLM: u32 = 100_021;
pub const NSM: u32 = 100_024;
const PMAP: u32 = 100_000;

/// A call the client host received: program, procedure, arguments.
pub type Received = (u32, u32, Bytes);

/// The client host this test plays: a portmapper (GETPORT answers this same port for
/// NLM and NSM), and NLM and NSM that record every call and answer GRANTED with
/// `granted_answer`.
struct FakeHost {
    program: u32,
    version: u32,
    port: u16,
    seen: mpsc::UnboundedSender<Received>,
    granted_answer: Arc<Mutex<Stats>>,
}

impl Program for FakeHost {
    fn program(&self) -> u32 {
        self.program
    }
    fn version(&self) -> u32 {
        self.version
    }
    fn procedure_name(&self, _: u32) -> Option<&'static str> {
        Some("fake")
    }
    fn call(
        &self,
        ctx: &CallContext,
        d: &mut Decoder,
        e: &mut Encoder,
    ) -> Option<Result<(), ProcError>> {
        let args = d.rest();
        if self.program == PMAP {
            // GETPORT(prog, vers, prot, port): this port for NLM 4 and NSM 1 over TCP.
            let mut words = Decoder::new(args);
            let (prog, vers, prot) = (words.u32().ok()?, words.u32().ok()?, words.u32().ok()?);
            let known = matches!((prog, vers), (NLM, 4) | (NSM, 1)) && prot == 6;
            e.u32(if known { u32::from(self.port) } else { 0 });
            return Some(Ok(()));
        }
        let _ = self.seen.send((self.program, ctx.procedure, args.clone()));
        if self.program == NLM && ctx.procedure == Proc::Granted as u32 {
            let cookie = TestArgs::from_xdr(args).ok()?.cookie;
            let stat = *self.granted_answer.lock().unwrap();
            Res { cookie, stat }.encode(e);
        }
        Some(Ok(()))
    }
    fn max_reply_bytes(&self, _: u32) -> usize {
        256
    }
    fn cache_class(&self, _: u32) -> Option<CacheClass> {
        Some(CacheClass::Idempotent)
    }
}

pub struct Host {
    pub port: u16,
    calls: mpsc::UnboundedReceiver<Received>,
    pub granted_answer: Arc<Mutex<Stats>>,
}

/// Whether `record` calls NLM GRANTED (program and procedure at words 3 and 5).
fn is_granted_call(record: &[u8]) -> bool {
    let word = |i| rpc::msg::header_word(record, i);
    word(3) == Some(NLM) && word(5) == Some(Proc::Granted as u32)
}

impl Host {
    pub async fn start() -> Self {
        Self::start_with(false).await
    }

    /// A host that reads GRANTED calls and never answers them (`silent`).
    pub async fn start_with(silent: bool) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, calls) = mpsc::unbounded_channel();
        let granted_answer = Arc::new(Mutex::new(Stats::Granted));
        let mut d = Dispatcher::new();
        for (program, version) in [(PMAP, 2), (NLM, 4), (NSM, 1)] {
            d.register(Box::new(FakeHost {
                program,
                version,
                port,
                seen: tx.clone(),
                granted_answer: Arc::clone(&granted_answer),
            }));
        }
        let d = Arc::new(d);
        tokio::spawn(async move {
            loop {
                let Ok((mut s, peer)) = listener.accept().await else {
                    return;
                };
                let d = Arc::clone(&d);
                tokio::spawn(async move {
                    let mut mark = [0u8; 4];
                    while s.read_exact(&mut mark).await.is_ok() {
                        let len = (u32::from_be_bytes(mark) & 0x7fff_ffff) as usize;
                        let mut body = vec![0; len];
                        if s.read_exact(&mut body).await.is_err() {
                            return;
                        }
                        let silence = silent && is_granted_call(&body);
                        let Ok(reply) = d.handle(Bytes::from(body), peer) else {
                            return;
                        };
                        if silence {
                            continue;
                        }
                        if s.write_all(&reply).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Self {
            port,
            calls,
            granted_answer,
        }
    }

    /// The next call that reached the host (not the portmapper), within 30 s.
    pub async fn next(&mut self) -> Received {
        tokio::time::timeout(Duration::from_secs(30), self.calls.recv())
            .await
            .expect("a callback within 30 s")
            .expect("host running")
    }

    /// No call within `wait`.
    pub async fn quiet(&mut self, wait: Duration) {
        let got = tokio::time::timeout(wait, self.calls.recv()).await;
        assert!(got.is_err(), "unexpected callback: {got:?}");
    }
}
