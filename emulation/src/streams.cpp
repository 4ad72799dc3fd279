// Streams, events and host callbacks.
//
// Each stream has a worker thread that runs its operations in FIFO order, so
// work really is asynchronous to the host, as on a GPU.  The legacy default
// stream's implicit synchronisation is expressed as extra dependencies added
// at enqueue time: an operation on the legacy stream waits for everything
// already queued on the context's blocking streams, and an operation on a
// blocking stream waits for everything already queued on the legacy stream.
#include "emu_internal.hpp"

#include <algorithm>
#include <cstdio>

namespace cuemu {

namespace {

// Stream and event handles are opaque tokens, not pointers: a destroyed
// handle is never reused, so it is always recognised as invalid, and host
// code that dereferences one faults (the addresses are non-canonical).
constexpr uint64_t kStreamHandleTag = 0x5354000000000000ull;
constexpr uint64_t kEventHandleTag = 0x4556000000000000ull;

bool is_special_stream(CUstream h) { return h == nullptr || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD; }

bool dep_done(const Dep& d) {  // caller holds prog_mu
  return d.stream ? d.stream->completed.load() >= d.seq : d.marker->done;
}

void worker_main(Stream* s) {
  t_in_stream_worker = true;  // host callbacks may not call the driver
  for (;;) {
    Op* op = nullptr;
    {
      std::unique_lock lk(s->mu);
      s->cv.wait(lk, [&] { return !s->queue.empty() || s->stop; });
      if (s->queue.empty()) break;
      op = &s->queue.front();  // deque: stays valid while others push_back
    }
    if (!op->deps.empty()) {
      std::unique_lock lk(g->prog_mu);
      g->prog_cv.wait(
          lk, [&] { return g->shutting_down.load() || std::all_of(op->deps.begin(), op->deps.end(), dep_done); });
    }
    if (unsigned us = g_op_delay_us.load()) {
      std::unique_lock lk(g->prog_mu);
      g->prog_cv.wait_for(lk, std::chrono::microseconds(us), [] { return g->shutting_down.load(); });
    }
    // At process exit pending work is dropped, as a real context teardown does.
    if (!g->shutting_down.load() && op->body) op->body(*s);
    Op done = std::move(*op);  // its captures die outside the queue lock
    {
      std::lock_guard lk(s->mu);
      s->queue.pop_front();
      s->completed.fetch_add(1);
    }
    notify_progress();
  }
  s->exited.store(true);
}

void add_position_dep(Op& op, const std::shared_ptr<Stream>& t) {
  uint64_t pos;
  {
    std::lock_guard lk(t->mu);
    pos = t->enqueued;
  }
  if (t->completed.load() < pos) op.deps.push_back(Dep{t, pos, nullptr});
}

CUresult lookup_event(CUevent h, std::shared_ptr<Event>* out) {
  std::lock_guard lk(g->mu);
  auto it = g->events.find(h);
  if (it == g->events.end()) return CUDA_ERROR_INVALID_HANDLE;
  *out = it->second;
  return CUDA_SUCCESS;
}

// The work `ev` last captured (null when never recorded), read under g->mu:
// cuEventRecord replaces it.
std::shared_ptr<Marker> last_marker(const Event& ev) {
  std::lock_guard lk(g->mu);
  return ev.last;
}

std::vector<std::pair<std::shared_ptr<Stream>, uint64_t>> snapshot_locked(Context* only) {
  std::vector<std::pair<std::shared_ptr<Stream>, uint64_t>> out;
  auto add = [&](const std::shared_ptr<Stream>& s) {
    std::lock_guard lk(s->mu);
    out.emplace_back(s, s->enqueued);
  };
  for (auto& [h, s] : g->streams)
    if (!only || s->ctx == only) add(s);
  // Destroyed streams still finishing their work count too.
  for (auto& s : g->zombies)
    if (!only || s->ctx == only) add(s);
  for (auto& d : g->devices) {
    Context& c = d->ctx;
    if (only && only != &c) continue;
    if (c.legacy) add(c.legacy);
    for (auto& [tid, s] : c.per_thread) add(s);
  }
  return out;
}

}  // namespace

void notify_progress() {
  { std::lock_guard lk(g->prog_mu); }
  g->prog_cv.notify_all();
}

std::shared_ptr<Stream> make_stream_locked(Context* ctx, StreamKind kind, unsigned flags) {
  auto s = std::make_shared<Stream>();
  s->id = g->next_id++;
  s->ctx = ctx;
  s->kind = kind;
  s->flags = flags;
  switch (kind) {
    case StreamKind::User: s->handle = reinterpret_cast<CUstream>(kStreamHandleTag | (s->id << 4)); break;
    case StreamKind::Legacy: s->handle = CU_STREAM_LEGACY; break;
    case StreamKind::PerThread: s->handle = CU_STREAM_PER_THREAD; break;
  }
  s->worker = std::thread(worker_main, s.get());
  return s;
}

void stop_stream(Stream& s) {
  {
    std::lock_guard lk(s.mu);
    s.stop = true;
  }
  s.cv.notify_all();
}

void reap_zombies_locked() {
  auto& z = g->zombies;
  for (auto it = z.begin(); it != z.end();) {
    if ((*it)->exited.load()) {
      (*it)->worker.join();
      it = z.erase(it);
    } else {
      ++it;
    }
  }
}

void shutdown_streams() {
  g->shutting_down.store(true);
  notify_progress();
  std::vector<std::shared_ptr<Stream>> all;
  {
    std::lock_guard lk(g->mu);
    for (auto& [h, s] : g->streams) all.push_back(s);
    g->streams.clear();
    for (auto& d : g->devices) {
      if (d->ctx.legacy) all.push_back(std::move(d->ctx.legacy));
      for (auto& [tid, s] : d->ctx.per_thread) all.push_back(std::move(s));
      d->ctx.per_thread.clear();
    }
    for (auto& s : g->zombies) all.push_back(std::move(s));
    g->zombies.clear();
  }
  for (auto& s : all) stop_stream(*s);
  for (auto& s : all)
    if (s->worker.joinable()) s->worker.join();
  // Break dependency cycles between queued operations of different streams.
  for (auto& s : all) s->queue.clear();
}

CUresult resolve_stream(CUstream h, std::shared_ptr<Stream>* out) {
  if (is_special_stream(h)) {
    Context* c = nullptr;
    if (CUresult r = current_context(&c)) return r;
    std::lock_guard lk(g->mu);
    if (!c->active.load()) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    if (h == CU_STREAM_PER_THREAD) {
      auto& s = c->per_thread[std::this_thread::get_id()];
      if (!s) {
        s = make_stream_locked(c, StreamKind::PerThread, 0);
        arm_per_thread_stream_cleanup();
      }
      *out = s;
    } else {
      if (!c->legacy) c->legacy = make_stream_locked(c, StreamKind::Legacy, 0);
      *out = c->legacy;
    }
    return CUDA_SUCCESS;
  }
  std::lock_guard lk(g->mu);
  auto it = g->streams.find(h);
  if (it == g->streams.end()) return CUDA_ERROR_INVALID_HANDLE;
  *out = it->second;
  return CUDA_SUCCESS;
}

CUresult enqueue(const std::shared_ptr<Stream>& s, Op op, uint64_t* seq) {
  // g->mu orders concurrent enqueues, so the implicit legacy-stream
  // dependencies of two racing operations never miss each other.
  std::lock_guard lk(g->mu);
  Context* c = s->ctx;
  if (s->kind == StreamKind::Legacy) {
    for (auto& [h, us] : g->streams)
      if (us->ctx == c && us->blocking()) add_position_dep(op, us);
    for (auto& [tid, ps] : c->per_thread) add_position_dep(op, ps);
  } else if (s->blocking() && c->legacy) {
    add_position_dep(op, c->legacy);
  }
  {
    std::lock_guard slk(s->mu);
    if (s->stop) return CUDA_ERROR_INVALID_HANDLE;
    s->queue.push_back(std::move(op));
    uint64_t pos = ++s->enqueued;
    if (seq) *seq = pos;
  }
  s->cv.notify_one();
  return CUDA_SUCCESS;
}

void wait_stream_pos(Stream& s, uint64_t seq) {
  std::unique_lock lk(g->prog_mu);
  g->prog_cv.wait(lk, [&] { return s.completed.load() >= seq || g->shutting_down.load(); });
}

void wait_stream_idle(Stream& s) {
  uint64_t seq;
  {
    std::lock_guard lk(s.mu);
    seq = s.enqueued;
  }
  wait_stream_pos(s, seq);
}

void wait_context_idle(Context& ctx) {
  std::vector<std::pair<std::shared_ptr<Stream>, uint64_t>> snap;
  {
    std::lock_guard lk(g->mu);
    snap = snapshot_locked(&ctx);
  }
  for (auto& [s, seq] : snap) wait_stream_pos(*s, seq);
}

void wait_all_idle() {
  std::vector<std::pair<std::shared_ptr<Stream>, uint64_t>> snap;
  {
    std::lock_guard lk(g->mu);
    snap = snapshot_locked(nullptr);
  }
  for (auto& [s, seq] : snap) wait_stream_pos(*s, seq);
}

CUresult finish_sync(Context& ctx) {
  {
    std::lock_guard lk(g->mu);
    Pool& p = g->devices[static_cast<size_t>(ctx.device)]->pool;
    trim_pool_locked(p, p.release_threshold);
    // Pools made with cuMemPoolCreate on this device too (imported pools own
    // no blocks here).
    for (auto& [h, created] : g->pools)
      if (created->kind == Pool::Kind::Created && created->device == ctx.device)
        trim_pool_locked(*created, created->release_threshold);
  }
  // A device fault is reported once, by the next synchronising call, and
  // does not poison the context for later work (the real driver's error is
  // sticky; here one test's fault must not ruin the rest of the process).
  return ctx.pending_faults.exchange(0) > 0 ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_SUCCESS;
}

void report_fault(Stream& s, const char* what, const char* why) {
  g_fault_count.fetch_add(1);
  s.ctx->pending_faults.fetch_add(1);
  std::fprintf(stderr,
               "cuarrow emulation: device fault: %s on stream %p (device %d) %s; the context's next "
               "synchronising call returns CUDA_ERROR_ILLEGAL_ADDRESS\n",
               what, static_cast<void*>(s.handle), s.ctx->device, why);
}

// ---------------------------------------------------------------------------
// Entry points

CUresult emu_cuCtxSynchronize_v2000() {
  if (CUresult r = check_init()) return r;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  wait_context_idle(*c);
  return finish_sync(*c);
}

CUresult emu_cuCtxSynchronize_v13000(CUcontext ctx) {
  if (!ctx) return emu_cuCtxSynchronize_v2000();
  if (CUresult r = check_init()) return r;
  Context* c = context_from_handle(ctx);
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  if (!c->active.load()) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  wait_context_idle(*c);
  return finish_sync(*c);
}

CUresult emu_cuStreamCreate_v2000(CUstream* phStream, unsigned int Flags) {
  if (CUresult r = check_init()) return r;
  if (!phStream || (Flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING))) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  std::lock_guard lk(g->mu);
  reap_zombies_locked();
  std::shared_ptr<Stream> s;
  try {
    s = make_stream_locked(c, StreamKind::User, Flags);
  } catch (const std::system_error&) {
    return CUDA_ERROR_OUT_OF_MEMORY;  // no thread for the worker
  }
  g->streams[s->handle] = s;
  *phStream = s->handle;
  return CUDA_SUCCESS;
}

CUresult emu_cuStreamDestroy_v4000(CUstream hStream) {
  if (CUresult r = check_init()) return r;
  if (is_special_stream(hStream)) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard lk(g->mu);
  auto it = g->streams.find(hStream);
  if (it == g->streams.end()) return CUDA_ERROR_INVALID_HANDLE;
  // Like the real driver: returns at once; queued work still completes.
  std::shared_ptr<Stream> s = std::move(it->second);
  g->streams.erase(it);
  stop_stream(*s);
  g->zombies.push_back(std::move(s));
  reap_zombies_locked();
  return CUDA_SUCCESS;
}

CUresult emu_cuStreamSynchronize_v2000(CUstream hStream) {
  if (CUresult r = check_init()) return r;
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(hStream, &s)) return r;
  wait_stream_idle(*s);
  return finish_sync(*s->ctx);
}

CUresult emu_cuStreamQuery_v2000(CUstream hStream) {
  if (CUresult r = check_init()) return r;
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(hStream, &s)) return r;
  std::lock_guard lk(s->mu);
  return s->completed.load() >= s->enqueued ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult emu_cuStreamWaitEvent_v3020(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  if (CUresult r = check_init()) return r;
  if (Flags != CU_EVENT_WAIT_DEFAULT) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(hStream, &s)) return r;
  std::shared_ptr<Event> ev;
  if (CUresult r = lookup_event(hEvent, &ev)) return r;
  std::shared_ptr<Marker> m = last_marker(*ev);
  if (!m) return CUDA_SUCCESS;  // never recorded: nothing to wait for
  // Waiting on an event of another context is allowed, as with the real driver.
  Op op;
  op.what = "cuStreamWaitEvent";
  op.deps.push_back(Dep{nullptr, 0, m});
  return enqueue(s, std::move(op));
}

CUresult emu_cuStreamGetCtx_v9020(CUstream hStream, CUcontext* pctx) {
  if (CUresult r = check_init()) return r;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(hStream, &s)) return r;
  *pctx = s->ctx->handle();
  return CUDA_SUCCESS;
}

CUresult emu_cuStreamGetCtx_v12050(CUstream hStream, CUcontext* pctx, CUgreenCtx* pGreenCtx) {
  if (!pctx && !pGreenCtx) return CUDA_ERROR_INVALID_VALUE;
  CUcontext c = nullptr;
  if (CUresult r = emu_cuStreamGetCtx_v9020(hStream, &c)) return r;
  if (pctx) *pctx = c;
  if (pGreenCtx) *pGreenCtx = nullptr;  // no green contexts here
  return CUDA_SUCCESS;
}

CUresult emu_cuEventCreate_v2000(CUevent* phEvent, unsigned int Flags) {
  if (CUresult r = check_init()) return r;
  constexpr unsigned kAll = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (!phEvent || (Flags & ~kAll)) return CUDA_ERROR_INVALID_VALUE;
  if ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING)) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  auto ev = std::make_shared<Event>();
  std::lock_guard lk(g->mu);
  ev->id = g->next_id++;
  ev->handle = reinterpret_cast<CUevent>(kEventHandleTag | (ev->id << 4));
  ev->ctx = c;
  ev->flags = Flags;
  g->events[ev->handle] = ev;
  *phEvent = ev->handle;
  return CUDA_SUCCESS;
}

CUresult emu_cuEventDestroy_v4000(CUevent hEvent) {
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g->mu);
  // A pending record still completes; waits on it still work.
  return g->events.erase(hEvent) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult emu_cuEventRecord_v2000(CUevent hEvent, CUstream hStream) {
  if (CUresult r = check_init()) return r;
  std::shared_ptr<Event> ev;
  if (CUresult r = lookup_event(hEvent, &ev)) return r;
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(hStream, &s)) return r;
  if (s->ctx != ev->ctx) return CUDA_ERROR_INVALID_HANDLE;  // as the real driver
  auto m = std::make_shared<Marker>();
  Op op;
  op.what = "cuEventRecord";
  op.body = [m](Stream&) {
    {
      std::lock_guard lk(g->prog_mu);
      m->when = Clock::now();
      m->done = true;
    }
    g->prog_cv.notify_all();
  };
  if (CUresult r = enqueue(s, std::move(op))) return r;
  std::lock_guard lk(g->mu);
  ev->last = std::move(m);
  return CUDA_SUCCESS;
}

CUresult emu_cuEventQuery_v2000(CUevent hEvent) {
  if (CUresult r = check_init()) return r;
  std::shared_ptr<Event> ev;
  if (CUresult r = lookup_event(hEvent, &ev)) return r;
  std::shared_ptr<Marker> m = last_marker(*ev);
  if (!m) return CUDA_SUCCESS;  // never recorded: complete
  std::lock_guard lk(g->prog_mu);
  return m->done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult emu_cuEventSynchronize_v2000(CUevent hEvent) {
  if (CUresult r = check_init()) return r;
  std::shared_ptr<Event> ev;
  if (CUresult r = lookup_event(hEvent, &ev)) return r;
  std::shared_ptr<Marker> m = last_marker(*ev);
  if (m) {
    std::unique_lock lk(g->prog_mu);
    g->prog_cv.wait(lk, [&] { return m->done || g->shutting_down.load(); });
  }
  return finish_sync(*ev->ctx);
}

CUresult emu_cuEventElapsedTime_v2000(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  if (CUresult r = check_init()) return r;
  if (!pMilliseconds) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Event> a, b;
  if (CUresult r = lookup_event(hStart, &a)) return r;
  if (CUresult r = lookup_event(hEnd, &b)) return r;
  std::shared_ptr<Marker> ma, mb;
  {
    std::lock_guard lk(g->mu);
    if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
    ma = a->last;
    mb = b->last;
  }
  if (!ma || !mb) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard lk(g->prog_mu);
  if (!ma->done || !mb->done) return CUDA_ERROR_NOT_READY;
  *pMilliseconds = std::chrono::duration<float, std::milli>(mb->when - ma->when).count();
  return CUDA_SUCCESS;
}

CUresult emu_cuLaunchHostFunc_v10000(CUstream hStream, CUhostFn fn, void* userData) {
  if (CUresult r = check_init()) return r;
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(hStream, &s)) return r;
  Op op;
  op.what = "cuLaunchHostFunc";
  op.body = [fn, userData](Stream&) { fn(userData); };
  return enqueue(s, std::move(op));
}

}  // namespace cuemu
