// Package hostproc is the runtime host's executable (cmd/maka-host): its
// command line ("maka-host serve"), the process around host.Start (signals,
// exit codes) and its start-up memory (pageout.go). Only maka-host links it,
// and with it the host's packages: the store, the model providers, the
// tools and the sandbox, whose per-call helper is this executable run again.
package hostproc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/maka-agent/maka/internal/control"
	"github.com/maka-agent/maka/internal/domain"
	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/model"
	"github.com/maka-agent/maka/internal/storageroot"
)

func newHostServeCommand() *cobra.Command {
	var rootPath, expectedRootID, logLevel, scriptPath string
	var idleGrace, retryBase time.Duration
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the runtime host in the foreground",
		Long: `Run the runtime host of a storage root in the foreground. It listens on a
private Unix socket, publishes its registration for clients, and drains
gracefully on SIGINT or SIGTERM (exit 0; 'maka host stop' from another
terminal does the same). It runs until stopped; a host that a client
starts on demand passes --idle-grace so that it exits once nobody uses it.
A second host for the same root exits with code 2 without touching
anything.`,
		Example: `  maka host serve                                      # until Ctrl-C or 'maka host stop'
  maka host serve --root ~/work/agents --idle-grace 10m  # exit after 10 idle minutes`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			root, err := rootFlag(rootPath)
			if err != nil {
				return exitf(2, "%v", err)
			}
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return exitf(2, "invalid --log-level %q (use debug, info, warn or error)", logLevel)
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
			var dopts domain.Options
			if retryBase < 0 || retryBase > model.DefaultRetryBase {
				return exitf(2, "--retry-base must be between 0 and %v", model.DefaultRetryBase)
			}
			dopts.Step.RetryBase = retryBase
			if scriptPath != "" {
				if dopts.Script, err = model.LoadScript(scriptPath); err != nil {
					return exitf(2, "invalid --model-script: %v", err)
				}
			}
			return serve(cmd.Context(), root, expectedRootID, idleGrace, log, dopts)
		},
	}
	cmd.Flags().StringVar(&rootPath, "root", "", "storage root directory")
	cmd.Flags().DurationVar(&idleGrace, "idle-grace", 0, "exit after this long with no client, operation or running work (0: never)")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	cmd.Flags().StringVar(&expectedRootID, "expected-root-id", "", "refuse to start unless the root has this id (used when clients start the host)")
	_ = cmd.Flags().MarkHidden("expected-root-id")
	// Tests of the whole host shorten the model's retry delays with it;
	// it can only shorten them.
	cmd.Flags().DurationVar(&retryBase, "retry-base", 0, "first retry delay of a failed model request (0: 1s; the cap is 32 times it)")
	_ = cmd.Flags().MarkHidden("retry-base")
	cmd.Flags().StringVar(&scriptPath, "model-script", "", "answer every turn with this scripted model (JSON script; offline demos and tests) instead of the connection catalog")
	return cmd
}

func serve(ctx context.Context, root, expectedRootID string, idleGrace time.Duration, log *slog.Logger, dopts domain.Options) error {
	if idleGrace < 0 || idleGrace > host.MaxTimerDuration {
		return exitf(2, "--idle-grace must be between 0 and %v", host.MaxTimerDuration)
	}
	var capability *storageroot.Capability
	var err error
	if expectedRootID != "" {
		capability, err = storageroot.ResolveExisting(root, storageroot.KindInteractive, expectedRootID)
	} else {
		capability, err = storageroot.Resolve(root, storageroot.KindInteractive)
	}
	if err != nil {
		return exitf(1, "cannot open storage root %s: %v", root, err)
	}
	owner, err := storageroot.TryAcquireOwner(capability)
	if err != nil {
		return exitf(1, "cannot lock storage root %s: %v", capability.Path(), err)
	}
	if owner == nil {
		msg := "a runtime host already owns " + capability.Path()
		if dir, err := storageroot.PrepareControlDirectory(capability); err == nil {
			if reg, found, err := control.ReadRegistration(dir); err == nil && found {
				msg += fmt.Sprintf(" (pid %d); see 'maka host status --root %s'", reg.PID, capability.Path())
			}
		}
		return exitf(2, "%s", msg)
	}
	opts := host.Options{Owner: owner, Logger: log, CompositionFactory: domain.Factory(capability.Path(), log, dopts),
		RefusePeer: domain.RefuseSandboxedPeer,
		// Once its work has ended, the host returns what the work left
		// free (garbage, and the Go heap kept for the next collection)
		// instead of keeping it until the next forced collection (2 min)
		// and the background scavenger (docs/benchmarks.md, "Memory").
		OnQuiet: debug.FreeOSMemory}
	if idleGrace == 0 {
		opts.DisableIdleExit = true
	} else {
		opts.IdleGrace = idleGrace
	}
	sigCtx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	k, err := host.Start(sigCtx, opts)
	if err != nil && !errors.Is(err, host.ErrClosed) {
		return exitf(1, "runtime host failed to start: %v", err)
	}
	if k != nil {
		// Startup is over: return its garbage and its read-only pages,
		// shortly after, so that the first client (usually the one that
		// started this host) is served first.
		trim := time.AfterFunc(200*time.Millisecond, func() {
			debug.FreeOSMemory()
			pageOutExecutable()
		})
		defer trim.Stop()
		select {
		case <-sigCtx.Done():
			log.Info("signal received; draining")
			k.RequestDrain()
		case <-k.Done():
		}
		err = k.Err()
	}
	if errors.Is(err, host.ErrProcessTerminationRequired) {
		return exitf(1, "runtime host did not shut down within its grace period")
	}
	if err != nil && !errors.Is(err, host.ErrClosed) {
		return exitf(1, "runtime host shut down with errors: %v", err)
	}
	log.Info("runtime host stopped")
	return nil
}
