// Command rpc-rl is the reinforcement-learning part of PyTorch's "Getting
// Started with Distributed RPC Framework" tutorial on package rpc:
// REINFORCE on CartPole-v1 with one agent and several observers, each a
// worker of its own. Start it with the launcher, one agent and two
// observers:
//
//	godist run --standalone --nproc-per-node 3 ./rpc-rl
//
// Rank 0 ("agent") holds the policy and its optimizer (reinforce.Agent);
// ranks 1..N ("observer1".."observerN") each own a CartPole environment.
// The agent creates one reinforce.Observer on every observer worker with
// Remote and keeps RRefs to them. Each episode it calls run_episode on
// every observer RRef at once, passing an RRef to itself; the observers
// call select_action and report_reward back on that RRef for every step
// (methods that run on the agent's worker), and when all are done the
// agent takes one REINFORCE step (FinishEpisode). It stops when the
// running reward passes 475, CartPole-v1's threshold, or after
// --max-episodes; progress goes to stderr and one JSON line to stdout.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/godist/godist/examples/progress"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/models/rl/reinforce"
	"github.com/godist/godist/rpc"
)

// totalSteps is the tutorial's TOTAL_EPISODE_STEP: an episode's steps are
// capped at totalSteps/N per observer.
const totalSteps = 5000

type config struct {
	seed        uint64
	maxEpisodes int
	logInterval int
	gamma, lr   float64
}

type result struct {
	Episodes      int     `json:"episodes"`
	RunningReward float64 `json:"running_reward"`
	Solved        bool    `json:"solved"`
	WallS         float64 `json:"wall_s"`
	Observers     int     `json:"observers"`
	Steps         int     `json:"steps"`
	StepsPerS     float64 `json:"steps_per_s"`
}

func main() {
	var c config
	flag.Uint64Var(&c.seed, "seed", 543, "seed of the policy, the action sampling and the environments")
	flag.IntVar(&c.maxEpisodes, "max-episodes", 1000, "stop after this many episodes if not solved")
	flag.IntVar(&c.logInterval, "log-interval", 10, "print the rewards every this many episodes")
	flag.Float64Var(&c.gamma, "gamma", 0.99, "discount factor")
	flag.Float64Var(&c.lr, "lr", 1e-2, "Adam's learning rate")
	flag.Parse()
	os.Exit(worker(context.Background(), c, os.Stdout, os.Stderr))
}

// worker is one process of the job: rank 0 the agent learning CartPole,
// the others its observers (godist run --nproc-per-node 1+observers). The
// agent's rewards and episodes end as one JSON line on stdout; the exit
// status is 0, or 1 with the error recorded for the launcher.
func worker(ctx context.Context, c config, stdout, stderr io.Writer) int {
	return dist.Main(ctx, "rpc-rl", dist.Options{}, stderr, func(ctx context.Context, g *dist.Group) error {
		return progress.JSONLine[*result](stdout)(run(ctx, g, c, stderr))
	})
}

// The registered functions' arguments.
type (
	observerArgs struct {
		ID   int
		Seed uint64
	}
	episodeArgs struct {
		Agent *rpc.RRef[*reinforce.Agent]
		Steps int
	}
	selectArgs struct {
		Observer int
		Obs      []float64
	}
	rewardArgs struct {
		Observer int
		Reward   float64
	}
)

// funcs are the functions every worker registers.
type funcs struct {
	// newObserver makes an Observer on the worker it runs on (called
	// with Remote: the Observer stays there).
	newObserver rpc.Fn[observerArgs, *reinforce.Observer]
	// runEpisode runs one episode of an Observer, calling back the agent.
	runEpisode rpc.Method[*reinforce.Observer, episodeArgs, float64]
	// selectAction and reportReward run on the Agent's worker.
	selectAction rpc.Method[*reinforce.Agent, selectArgs, int]
	reportReward rpc.Method[*reinforce.Agent, rewardArgs, struct{}]
}

// register registers the functions in reg. Handlers that call out find
// their agent with rpc.AgentFrom.
func register(reg *rpc.Registry) (*funcs, error) {
	f := &funcs{}
	var errs [4]error
	f.newObserver, errs[0] = rpc.Register(reg, "new_observer", func(_ context.Context, a observerArgs) (*reinforce.Observer, error) {
		return reinforce.NewObserver(a.ID, a.Seed), nil
	})
	f.runEpisode, errs[1] = rpc.RegisterMethod(reg, "observer.run_episode", func(ctx context.Context, o *reinforce.Observer, a episodeArgs) (float64, error) {
		defer a.Agent.Release()
		agent, ok := rpc.AgentFrom(ctx)
		if !ok {
			return 0, errors.New("run_episode called outside an RPC")
		}
		return o.RunEpisode(&remoteAgent{ctx: ctx, a: agent, ref: a.Agent, f: f}, a.Steps)
	})
	f.selectAction, errs[2] = rpc.RegisterMethod(reg, "agent.select_action", func(_ context.Context, ag *reinforce.Agent, a selectArgs) (int, error) {
		return ag.SelectAction(a.Observer, a.Obs)
	})
	f.reportReward, errs[3] = rpc.RegisterMethod(reg, "agent.report_reward", func(_ context.Context, ag *reinforce.Agent, a rewardArgs) (struct{}, error) {
		return struct{}{}, ag.ReportReward(a.Observer, a.Reward)
	})
	return f, errors.Join(errs[:]...)
}

// remoteAgent is the Agent as an observer sees it: each call is a method
// call on the agent's RRef, run on the agent's worker.
type remoteAgent struct {
	ctx context.Context
	a   *rpc.Agent
	ref *rpc.RRef[*reinforce.Agent]
	f   *funcs
}

var _ reinforce.Actor = (*remoteAgent)(nil)

func (r *remoteAgent) SelectAction(observer int, obs []float64) (int, error) {
	return r.f.selectAction.Call(r.ctx, r.a, r.ref, selectArgs{observer, obs})
}

func (r *remoteAgent) ReportReward(observer int, reward float64) error {
	_, err := r.f.reportReward.Call(r.ctx, r.a, r.ref, rewardArgs{observer, reward})
	return err
}

// workerName is rank's name, the tutorial's.
func workerName(rank int) string {
	if rank == 0 {
		return "agent"
	}
	return fmt.Sprintf("observer%d", rank)
}

// run is one worker: rank 0 trains and returns the result, the others
// serve until the agent shuts down and return nil. Every worker shuts its
// RPC agent down gracefully.
func run(ctx context.Context, g *dist.Group, c config, log io.Writer) (*result, error) {
	if g.Size() < 2 {
		return nil, fmt.Errorf("rpc-rl needs an agent and at least one observer: start it with godist run --nproc-per-node 3 (world size %d)", g.Size())
	}
	reg := rpc.NewRegistry()
	f, err := register(reg)
	if err != nil {
		return nil, err
	}
	var res *result
	// Observers serve until the agent is done with them.
	err = rpc.Run(ctx, workerName(g.Rank()), rpc.Options{Group: g, Functions: reg}, func(ctx context.Context, a *rpc.Agent) (err error) {
		if g.Rank() == 0 {
			res, err = train(ctx, a, f, c, log)
		}
		return err
	})
	return res, err
}

// train is the agent's loop (the tutorial's Agent and run_worker for rank
// 0).
func train(ctx context.Context, a *rpc.Agent, f *funcs, c config, log io.Writer) (*result, error) {
	n := len(a.Workers()) - 1
	agent := reinforce.NewAgent(reinforce.Options{Seed: c.seed, Gamma: c.gamma, LR: c.lr})
	self := rpc.NewRRef(a, agent)
	defer self.Release()
	obs := make([]*rpc.RRef[*reinforce.Observer], n)
	for i := range obs {
		r := i + 1
		var err error
		// The same environment seeds as the single-process tests.
		if obs[i], err = f.newObserver.Remote(ctx, a, workerName(r), observerArgs{ID: r, Seed: c.seed*100 + uint64(i)}); err != nil {
			return nil, err
		}
		defer obs[i].Release()
	}
	fmt.Fprintf(log, "agent: %d observers, at most %d steps each per episode, seed %d\n", n, totalSteps/n, c.seed)

	start := time.Now()
	res := &result{Observers: n}
	for ep := 1; ep <= c.maxEpisodes; ep++ {
		futs := make([]*rpc.Future[float64], n)
		for i, o := range obs {
			futs[i] = f.runEpisode.Go(ctx, a, o, episodeArgs{Agent: self, Steps: totalSteps / n})
		}
		if _, err := rpc.WaitAll(ctx, futs); err != nil {
			return nil, fmt.Errorf("episode %d: %w", ep, err)
		}
		e, err := agent.FinishEpisode()
		if err != nil {
			return nil, fmt.Errorf("episode %d: %w", ep, err)
		}
		res.Episodes, res.RunningReward, res.Steps = ep, e.Running, res.Steps+e.Steps
		solved := agent.Solved()
		if ep%c.logInterval == 0 || solved {
			fmt.Fprintf(log, "Episode %d\tLast reward: %.2f\tAverage reward: %.2f\t(%.0f steps/s)\n",
				ep, e.Reward, e.Running, float64(res.Steps)/time.Since(start).Seconds())
		}
		if solved {
			res.Solved = true
			fmt.Fprintf(log, "Solved! Running reward is now %.2f!\n", e.Running)
			break
		}
	}
	res.WallS = time.Since(start).Seconds()
	res.StepsPerS = float64(res.Steps) / res.WallS
	fmt.Fprintf(log, "%d episodes, %d steps in %.1f s\n", res.Episodes, res.Steps, res.WallS)
	return res, nil
}
