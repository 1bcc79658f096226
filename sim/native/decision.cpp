// The simulator's CPU kernel: one whole decision step (sim/RULES.md) for a block of environments
// at a time, with the block's state held in small local arrays across all physics steps.
//
// Why this shape: the torch path runs each phase over all N environments, so every physics step
// streams the whole state through memory several times, and it integrates every missile slot
// whether it flies or not (static shapes keep it branchless and graph-capturable on
// accelerators). Here a block of LANES environments is loaded once, stepped through all its
// physics steps in L1, closed (truncation, outcome, rewards), observed and stored once; the
// lane loops are plain elementwise code that the compiler vectorizes, and a missile slot that is
// idle in every lane of the block is skipped.
//
// Semantics follow sim/kernels.py and sim/observe.py line by line; only the rounding differs
// (sin/cos of the exact turn come from a short polynomial in float32, and frozen bodies are not
// touched at all). Registered as torch.ops.midrange_sim.* so torch.compile treats it as opaque;
// the dispatcher releases the GIL while it runs.
//
// The parts: lanes.h (lane vectors), params.h (the model's parameters), state.h (the state as
// pointers and one block of it in lane vectors), physics.h (one physics step), observe.h (the
// observation builder); this file holds the two ops and their registration.

#include <ATen/Parallel.h>
#include <torch/library.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "lanes.h"
#include "observe.h"
#include "params.h"
#include "physics.h"
#include "state.h"

namespace {

// ------------------------------------------------------------------ the ops

template <typename T>
void decision_impl(const std::vector<at::Tensor>& state, const std::vector<at::Tensor>& acc,
                   at::Tensor& obs, at::Tensor& final_obs, const Params<T>& P, bool write_obs) {
  const StatePtrs<T> sp(state);
  const int64_t n = sp.n;
  TORCH_CHECK(acc.size() == NUM_ACC, "midrange_sim: expected ", NUM_ACC, " accumulator tensors");
  for (const auto& t : acc) {
    TORCH_CHECK(t.device().is_cpu() && t.is_contiguous(), "midrange_sim: accumulators must be contiguous CPU tensors");
  }
  bool* a_live = acc[A_LIVE].data_ptr<bool>();
  bool* a_term = acc[A_TERMINATED].data_ptr<bool>();
  bool* a_trunc = acc[A_TRUNCATED].data_ptr<bool>();
  bool* a_done = acc[A_DONE].data_ptr<bool>();
  int64_t* a_winner = acc[A_WINNER].data_ptr<int64_t>();
  int64_t* a_end = acc[A_END].data_ptr<int64_t>();
  int64_t* a_launch = acc[A_LAUNCHES].data_ptr<int64_t>();
  int64_t* a_hits = acc[A_HITS].data_ptr<int64_t>();
  T* a_reward = acc[A_REWARD].data_ptr<T>();
  T* o1 = nullptr;
  T* o2 = nullptr;
  if (write_obs) {
    TORCH_CHECK(obs.is_contiguous() && final_obs.is_contiguous() && obs.numel() == n * 2 * P.obs_dim &&
                    final_obs.numel() == n * 2 * P.obs_dim,
                "midrange_sim: observation buffers must be contiguous [N, 2, obs_dim]");
    o1 = final_obs.data_ptr<T>();
    o2 = obs.data_ptr<T>();
  }
  const int64_t blocks = (n + LANES - 1) / LANES;
  at::parallel_for(0, blocks, 16, [&](int64_t begin, int64_t end) {
    typedef typename Lanes<T>::I I;
    const I zero_i = {};
    Block<T> b;
    std::vector<T> buf(size_t(LANES) * 2 * P.obs_dim);
    for (int64_t blk = begin; blk < end; ++blk) {
      for (int l = 0; l < LANES; ++l) {
        const int64_t e = blk * LANES + l;
        b.env[l] = e < n ? e : -1;
        b.live[l] = e < n ? -1 : 0;
      }
      b.load(sp, P.slots);
      b.terminated = b.truncated = zero_i;
      b.winner = zero_i - 1;
      b.reason = zero_i;
      b.launches[0] = b.launches[1] = b.hits[0] = b.hits[1] = zero_i;
      for (int step = 0; step < P.steps && any_of(b.live); ++step) {
        physics_step(b, P);  // once every lane's episode ended, the block is frozen
      }
      // The decision's closing: truncation, done, rewards.
      const I trunc = b.live & (b.physics >= static_cast<typename Block<T>::IS>(P.time_limit));
      b.truncated = trunc;
      b.winner = trunc ? zero_i + 2 : b.winner;
      b.reason = trunc ? zero_i + 5 : b.reason;
      b.done = b.terminated | trunc;
      b.store(sp, P.slots);
      for (int l = 0; l < LANES; ++l) {
        const int64_t e = b.env[l];
        if (e < 0) continue;
        a_live[e] = b.live[l] != 0; a_term[e] = b.terminated[l] != 0; a_trunc[e] = b.truncated[l] != 0;
        a_done[e] = b.done[l] != 0; a_winner[e] = b.winner[l]; a_end[e] = b.reason[l];
        a_launch[e] = b.launches[0][l]; a_launch[n + e] = b.launches[1][l];
        a_hits[e] = b.hits[0][l]; a_hits[n + e] = b.hits[1][l];
        const T red = (b.terminated[l] && b.winner[l] == 0) ? T(1) : T(0);
        const T blue = (b.terminated[l] && b.winner[l] == 1) ? T(1) : T(0);
        a_reward[e] = red - blue;
        a_reward[n + e] = blue - red;
      }
      if (write_obs) observe_block(b, P, buf.data(), o1, o2);
    }
  });
}

template <typename T>
void observe_impl(const std::vector<at::Tensor>& state, const at::Tensor& env_index, at::Tensor& out,
                  const Params<T>& P) {
  const StatePtrs<T> sp(state);
  TORCH_CHECK(env_index.scalar_type() == at::kLong && env_index.is_contiguous() && env_index.dim() == 1,
              "midrange_sim: env_index must be a contiguous int64 vector");
  TORCH_CHECK(out.is_contiguous() && out.numel() == sp.n * 2 * P.obs_dim,
              "midrange_sim: out must be a contiguous [N, 2, obs_dim] buffer");
  const int64_t* idx = env_index.data_ptr<int64_t>();
  const int64_t count = env_index.numel();
  for (int64_t i = 0; i < count; ++i) {
    TORCH_CHECK(idx[i] >= 0 && idx[i] < sp.n, "midrange_sim: env_index out of range");
  }
  T* o = out.data_ptr<T>();
  const int64_t blocks = (count + LANES - 1) / LANES;
  at::parallel_for(0, blocks, 16, [&](int64_t begin, int64_t end) {
    Block<T> b;
    std::vector<T> buf(size_t(LANES) * 2 * P.obs_dim);
    for (int64_t blk = begin; blk < end; ++blk) {
      for (int l = 0; l < LANES; ++l) {
        const int64_t i = blk * LANES + l;
        b.env[l] = i < count ? idx[i] : -1;
      }
      b.load(sp, P.slots);
      observe_block(b, P, buf.data(), o, static_cast<T*>(nullptr));
    }
  });
}

// The float parameters arrive as one float64 tensor built once per simulator: with the reach
// table that is over a thousand values, which a float[] argument would box one by one per call.
std::vector<double> float_params(const at::Tensor& fparams) {
  TORCH_CHECK(fparams.device().is_cpu() && fparams.scalar_type() == at::kDouble && fparams.dim() == 1 &&
                  fparams.is_contiguous(),
              "midrange_sim: fparams must be a contiguous 1-D float64 CPU tensor");
  const double* p = fparams.data_ptr<double>();
  return std::vector<double>(p, p + fparams.numel());
}

void decision_step(at::TensorList state, at::TensorList acc, at::Tensor obs, at::Tensor final_obs,
                   at::Tensor fparams, at::IntArrayRef iparams, bool write_obs) {
  const std::vector<at::Tensor> s(state.begin(), state.end());
  const std::vector<at::Tensor> a(acc.begin(), acc.end());
  const std::vector<double> f = float_params(fparams);
  const std::vector<int64_t> i(iparams.begin(), iparams.end());
  const auto dtype = s.at(S_F_PX).scalar_type();
  if (dtype == at::kFloat) {
    decision_impl<float>(s, a, obs, final_obs, Params<float>(f, i), write_obs);
  } else if (dtype == at::kDouble) {
    decision_impl<double>(s, a, obs, final_obs, Params<double>(f, i), write_obs);
  } else {
    TORCH_CHECK(false, "midrange_sim: state must be float32 or float64, got ", dtype);
  }
}

void observe(at::TensorList state, at::Tensor env_index, at::Tensor out, at::Tensor fparams,
             at::IntArrayRef iparams) {
  const std::vector<at::Tensor> s(state.begin(), state.end());
  const std::vector<double> f = float_params(fparams);
  const std::vector<int64_t> i(iparams.begin(), iparams.end());
  const auto dtype = s.at(S_F_PX).scalar_type();
  if (dtype == at::kFloat) {
    observe_impl<float>(s, env_index, out, Params<float>(f, i));
  } else if (dtype == at::kDouble) {
    observe_impl<double>(s, env_index, out, Params<double>(f, i));
  } else {
    TORCH_CHECK(false, "midrange_sim: state must be float32 or float64, got ", dtype);
  }
}

}  // namespace

TORCH_LIBRARY(midrange_sim, m) {
  m.def(
      "decision_step(Tensor(a!)[] state, Tensor(b!)[] acc, Tensor(c!) obs, Tensor(d!) final_obs, "
      "Tensor fparams, int[] iparams, bool write_obs) -> ()");
  m.def("observe(Tensor[] state, Tensor env_index, Tensor(a!) out, Tensor fparams, int[] iparams) -> ()");
}

TORCH_LIBRARY_IMPL(midrange_sim, CPU, m) {
  m.impl("decision_step", &decision_step);
  m.impl("observe", &observe);
}
