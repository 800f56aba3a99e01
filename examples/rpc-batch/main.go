// Command rpc-batch is the reinforcement-learning part of PyTorch's
// "Implementing Batch RPC Processing Using Asynchronous Executions"
// tutorial on package rpc: the agent answers its observers' action
// requests in batches, one forward pass for all of them. Start it with the
// launcher, an agent and four observers:
//
//	godist run --standalone --nproc-per-node 5 ./rpc-batch --batch=true
//	godist run --standalone --nproc-per-node 5 ./rpc-batch --batch=false
//
// Rank 0 ("agent") holds a reinforce.BatchAgent; ranks 1..N
// ("observer1".."observerN") each own a reinforce.Observer, made there with
// Remote. Each episode the agent calls run_episode on every observer's RRef
// at once; an observer takes exactly --steps steps (resetting CartPole as
// its episodes end), asking the agent's RRef for every action, and
// returns its discounted returns. With --batch=false every request runs a
// forward pass of its own (select_action); with --batch=true
// select_action_batch is an asynchronous method (RegisterMethodAsync,
// PyTorch's @rpc.functions.async_execution): a request parks its
// observation and its future and returns, and the request that completes
// the step's batch runs one forward pass over the N×4 observations and
// completes every future. The update is the tutorial's: one loss over all
// observers' returns. Progress goes to stderr, one JSON line to stdout.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/godist/godist/examples/progress"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/models/rl/reinforce"
	"github.com/godist/godist/rpc"
)

type config struct {
	batch       bool
	observers   int // 0: the world size less one
	episodes    int
	steps       int
	seed        uint64
	gamma, lr   float64
	logInterval int
}

type result struct {
	Batch         bool    `json:"batch"`
	Observers     int     `json:"observers"`
	Episodes      int     `json:"episodes"`
	Steps         int     `json:"steps"`
	Forwards      int64   `json:"forward_passes"`
	RunningReward float64 `json:"running_reward"`
	WallS         float64 `json:"wall_s"`
	StepsPerS     float64 `json:"steps_per_s"`
}

func main() {
	var c config
	flag.BoolVar(&c.batch, "batch", true, "answer each step's action requests with one forward pass for all observers")
	flag.IntVar(&c.observers, "observers", 0, "number of observers, which must be the world size less one (0: whatever the world size gives)")
	flag.IntVar(&c.episodes, "episodes", 10, "episodes to run")
	flag.IntVar(&c.steps, "steps", 500, "steps per observer per episode")
	flag.Uint64Var(&c.seed, "seed", 543, "seed of the policy, the action sampling and the environments")
	flag.Float64Var(&c.gamma, "gamma", 0.99, "discount factor")
	flag.Float64Var(&c.lr, "lr", 1e-2, "Adam's learning rate")
	flag.IntVar(&c.logInterval, "log-interval", 1, "print the rewards every this many episodes")
	flag.Parse()
	os.Exit(worker(context.Background(), c, os.Stdout, os.Stderr))
}

// worker is one process of the job: rank 0 the agent that answers its
// observers' requests for actions in batches, the others the observers.
// The agent's result ends as one JSON line on stdout; the exit status is
// 0, or 1 with the error recorded for the launcher.
func worker(ctx context.Context, c config, stdout, stderr io.Writer) int {
	return dist.Main(ctx, "rpc-batch", dist.Options{}, stderr, func(ctx context.Context, g *dist.Group) error {
		return progress.JSONLine[*result](stdout)(run(ctx, g, c, stderr))
	})
}

// server is the agent as its RRef holds it: the policy and the batch
// being gathered.
type server struct {
	agent    *reinforce.BatchAgent
	batch    *batcher
	forwards atomic.Int64
}

// selectOne answers one request with a forward pass of its own.
func (s *server) selectOne(observer int, obs []float64) (int, error) {
	s.forwards.Add(1)
	return s.agent.SelectAction(observer, obs)
}

// selectBatch parks the request; the request that completes the batch
// answers them all.
func (s *server) selectBatch(observer int, obs []float64) *rpc.Future[int] {
	f := rpc.NewFuture[int]()
	full, err := s.batch.add(observer, obs, f)
	if err != nil {
		f.Set(0, err)
		return f
	}
	if full != nil {
		s.forwards.Add(1)
		actions, err := s.agent.SelectActions(full.observers, full.obs)
		for i, fut := range full.futs {
			if err != nil {
				fut.Set(0, err)
			} else {
				fut.Set(actions[i], nil)
			}
		}
	}
	return f
}

// batcher gathers one step's action requests until every observer has
// asked. It only collects: the caller runs the batch it hands back.
type batcher struct {
	n  int
	mu struct {
		sync.Mutex
		pending batch
	}
}

// batch is the requests of one step, sorted by observer, so that the
// rows (and the actions drawn for them) come in the same order whatever
// the order of arrival.
type batch struct {
	observers []int
	obs       [][]float64
	futs      []*rpc.Future[int]
}

func newBatcher(n int) *batcher { return &batcher{n: n} }

// add parks observer's request with obs and the future to complete. When
// it completes the batch, add returns the batch and starts a new one.
// An observer asking twice in one batch is an error.
func (b *batcher) add(observer int, obs []float64, f *rpc.Future[int]) (*batch, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := &b.mu.pending
	i, found := slices.BinarySearch(p.observers, observer)
	if found {
		return nil, fmt.Errorf("observer %d asked for a second action before the step's batch was complete", observer)
	}
	p.observers = slices.Insert(p.observers, i, observer)
	p.obs = slices.Insert(p.obs, i, obs)
	p.futs = slices.Insert(p.futs, i, f)
	if len(p.observers) < b.n {
		return nil, nil
	}
	full := *p
	*p = batch{}
	return &full, nil
}

// The registered functions' arguments.
type (
	observerArgs struct {
		ID   int
		Seed uint64
	}
	episodeArgs struct {
		Agent *rpc.RRef[*server]
		Steps int
		Batch bool
		Gamma float64
	}
	selectArgs struct {
		Observer int
		Obs      []float64
	}
)

// funcs are the functions every worker registers.
type funcs struct {
	newObserver rpc.Fn[observerArgs, *reinforce.Observer]
	runEpisode  rpc.Method[*reinforce.Observer, episodeArgs, reinforce.Steps]
	// selectAction runs a forward pass per request; selectBatch is
	// asynchronous and answers when the step's batch is complete.
	selectAction, selectBatch rpc.Method[*server, selectArgs, int]
}

// register registers the functions in reg. Handlers that call out find
// their agent with rpc.AgentFrom.
func register(reg *rpc.Registry) (*funcs, error) {
	f := &funcs{}
	var errs [4]error
	f.newObserver, errs[0] = rpc.Register(reg, "new_observer", func(_ context.Context, a observerArgs) (*reinforce.Observer, error) {
		return reinforce.NewObserver(a.ID, a.Seed), nil
	})
	f.runEpisode, errs[1] = rpc.RegisterMethod(reg, "observer.run_episode", func(ctx context.Context, o *reinforce.Observer, a episodeArgs) (reinforce.Steps, error) {
		defer a.Agent.Release()
		agent, ok := rpc.AgentFrom(ctx)
		if !ok {
			return reinforce.Steps{}, errors.New("run_episode called outside an RPC")
		}
		sel := f.selectAction
		if a.Batch {
			sel = f.selectBatch
		}
		return o.RunSteps(&remoteAgent{ctx: ctx, a: agent, ref: a.Agent, sel: sel}, a.Steps, a.Gamma)
	})
	f.selectAction, errs[2] = rpc.RegisterMethod(reg, "agent.select_action", func(_ context.Context, s *server, a selectArgs) (int, error) {
		return s.selectOne(a.Observer, a.Obs)
	})
	f.selectBatch, errs[3] = rpc.RegisterMethodAsync(reg, "agent.select_action_batch", func(_ context.Context, s *server, a selectArgs) *rpc.Future[int] {
		return s.selectBatch(a.Observer, a.Obs)
	})
	return f, errors.Join(errs[:]...)
}

// remoteAgent selects actions by calling sel on the agent's RRef.
type remoteAgent struct {
	ctx context.Context
	a   *rpc.Agent
	ref *rpc.RRef[*server]
	sel rpc.Method[*server, selectArgs, int]
}

var _ reinforce.Selector = (*remoteAgent)(nil)

func (r *remoteAgent) SelectAction(observer int, obs []float64) (int, error) {
	return r.sel.Call(r.ctx, r.a, r.ref, selectArgs{observer, obs})
}

func workerName(rank int) string {
	if rank == 0 {
		return "agent"
	}
	return fmt.Sprintf("observer%d", rank)
}

// run is one worker: rank 0 trains and returns the result, the others
// serve until the agent is done and return nil.
func run(ctx context.Context, g *dist.Group, c config, log io.Writer) (*result, error) {
	if g.Size() < 2 {
		return nil, fmt.Errorf("rpc-batch needs an agent and at least one observer: start it with godist run --nproc-per-node 5 (world size %d)", g.Size())
	}
	if c.observers != 0 && c.observers != g.Size()-1 {
		return nil, fmt.Errorf("--observers %d needs a world size of %d (godist run --nproc-per-node %d), not %d", c.observers, c.observers+1, c.observers+1, g.Size())
	}
	reg := rpc.NewRegistry()
	f, err := register(reg)
	if err != nil {
		return nil, err
	}
	var res *result
	err = rpc.Run(ctx, workerName(g.Rank()), rpc.Options{Group: g, Functions: reg}, func(ctx context.Context, a *rpc.Agent) (err error) {
		if g.Rank() == 0 {
			res, err = train(ctx, a, f, c, log)
		}
		return err
	})
	return res, err
}

// train is the agent's loop (the tutorial's Agent and run_worker for
// rank 0).
func train(ctx context.Context, a *rpc.Agent, f *funcs, c config, log io.Writer) (*result, error) {
	n := len(a.Workers()) - 1
	s := &server{
		agent: reinforce.NewBatchAgent(reinforce.Options{Seed: c.seed, Gamma: c.gamma, LR: c.lr}),
		batch: newBatcher(n),
	}
	self := rpc.NewRRef(a, s)
	defer self.Release()
	obs := make([]*rpc.RRef[*reinforce.Observer], n)
	for i := range obs {
		var err error
		if obs[i], err = f.newObserver.Remote(ctx, a, workerName(i+1), observerArgs{ID: i + 1, Seed: c.seed*100 + uint64(i)}); err != nil {
			return nil, err
		}
		defer obs[i].Release()
	}
	mode := "unbatched: a forward pass per request"
	if c.batch {
		mode = fmt.Sprintf("batched: one forward pass per step for all %d observers", n)
	}
	fmt.Fprintf(log, "agent: %d observers, %d steps each per episode, %s\n", n, c.steps, mode)

	start := time.Now()
	res := &result{Batch: c.batch, Observers: n}
	for ep := 1; ep <= c.episodes; ep++ {
		futs := make([]*rpc.Future[reinforce.Steps], n)
		for i, o := range obs {
			futs[i] = f.runEpisode.Go(ctx, a, o, episodeArgs{Agent: self, Steps: c.steps, Batch: c.batch, Gamma: c.gamma})
		}
		rets, err := rpc.WaitAll(ctx, futs)
		if err != nil {
			return nil, fmt.Errorf("episode %d: %w", ep, err)
		}
		steps := make(map[int]reinforce.Steps, n)
		for i, r := range rets {
			steps[i+1] = r
		}
		e, err := s.agent.Finish(steps)
		if err != nil {
			return nil, fmt.Errorf("episode %d: %w", ep, err)
		}
		res.Episodes, res.RunningReward, res.Steps = ep, e.Running, res.Steps+e.Steps
		if ep%c.logInterval == 0 || ep == c.episodes {
			fmt.Fprintf(log, "Episode %d\tLast reward: %.2f\tRunning reward: %.2f\t(%.0f steps/s)\n",
				ep, e.Reward, e.Running, float64(res.Steps)/time.Since(start).Seconds())
		}
	}
	res.WallS = time.Since(start).Seconds()
	res.StepsPerS = float64(res.Steps) / res.WallS
	res.Forwards = s.forwards.Load()
	fmt.Fprintf(log, "%d episodes, %d steps, %d forward passes in %.1f s: %.0f steps/s\n",
		res.Episodes, res.Steps, res.Forwards, res.WallS, res.StepsPerS)
	return res, nil
}
