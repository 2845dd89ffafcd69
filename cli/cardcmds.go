package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/tessera-gpu/tessera/api"
	"github.com/tessera-gpu/tessera/pluginargs"
)

// The commands that take cards out of service and back: cordon, uncordon, drain. They
// write the node's api.AnnotationCordonedCards (and drain evicts), so they print what
// they did as text, whatever -o says.

// cardFlags are the flags of the card commands.
type cardFlags struct {
	reason  string
	dryRun  bool
	timeout time.Duration
}

const cardArgs = "NODE CARD..."

// cardCommands are cordon, uncordon and drain.
func cardCommands(env Env, o *options) []*cobra.Command {
	cordon := &cobra.Command{Use: "cordon " + cardArgs,
		Short: "take cards out of service: no new vGPU task goes to them; their pods keep running"}
	uncordon := &cobra.Command{Use: "uncordon " + cardArgs, Short: "put cordoned cards back in service"}
	drain := &cobra.Command{Use: "drain " + cardArgs,
		Short: "cordon cards and evict their pods through the Eviction API (PodDisruptionBudgets hold), then wait until they are gone"}
	long := "CARD is a card's index as `nodes` shows it, or its UUID.\n"
	for _, c := range []*cobra.Command{cordon, uncordon, drain} {
		f := &cardFlags{}
		c.Long = long
		c.Args = cardCommandArgs
		c.ValidArgsFunction = nodeThenNoCompletion(env, o)
		c.Annotations = map[string]string{annotationCluster: "true"}
		if c != uncordon {
			c.Flags().StringVar(&f.reason, "reason", "", fmt.Sprintf("why, shown by nodes, explain and a pending pod's reason (at most %d bytes, one line)", api.MaxCordonReasonBytes))
		}
		if c == drain {
			c.Flags().BoolVar(&f.dryRun, "dry-run", false, "say what would be cordoned and evicted; change nothing")
			c.Flags().DurationVar(&f.timeout, "timeout", 5*time.Minute, "give up waiting for the pods to go after this long")
		}
		run := map[*cobra.Command]func(context.Context, *cardRun) error{cordon: runCordon, uncordon: runUncordon, drain: runDrain}[c]
		c.RunE = func(cmd *cobra.Command, args []string) error {
			r, err := newCardRun(env, o, f, cmd, args)
			if err != nil {
				return err
			}
			return run(contextOf(cmd), r)
		}
	}
	return []*cobra.Command{cordon, uncordon, drain}
}

func cardCommandArgs(c *cobra.Command, args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("%w: %s takes a node and at least one card (its index as `nodes` shows it, or its UUID)", ErrUsage, c.Name())
	}
	return nil
}

// nodeThenNoCompletion completes the node name, then nothing.
func nodeThenNoCompletion(env Env, o *options) cobra.CompletionFunc {
	return func(c *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return clusterNames(c, env, o, "nodes"), cobra.ShellCompDirectiveNoFileComp
	}
}

// cardRun is one card command's parsed command line and client.
type cardRun struct {
	env    Env
	o      *options
	f      *cardFlags
	node   string
	cards  []string
	client kubernetes.Interface
	// setReason: --reason was given (a cordon's reason is kept otherwise).
	setReason bool
}

func newCardRun(env Env, o *options, f *cardFlags, cmd *cobra.Command, args []string) (*cardRun, error) {
	if o.out.format != "" && o.out.format != formatText || o.out.template != "" {
		return nil, fmt.Errorf("%w: %s prints what it did as text; -o and --template are for the views", ErrUsage, cmd.Name())
	}
	if err := api.ValidateCordonReason(f.reason); err != nil {
		return nil, fmt.Errorf("%w: --reason %v", ErrUsage, err)
	}
	if f.timeout <= 0 && cmd.Name() == "drain" {
		return nil, fmt.Errorf("%w: --timeout %s: want a positive duration", ErrUsage, f.timeout)
	}
	client, _, err := env.Client(o.kubeconfig, &o.overrides)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return &cardRun{env: env, o: o, f: f, node: args[0], cards: args[1:], client: client,
		setReason: cmd.Flags().Changed("reason")}, nil
}

func (r *cardRun) report(verb string, changes []cardChange) {
	for _, c := range changes {
		fmt.Fprintf(r.env.Stdout, "%s%s: %s\n", verb, r.node, c)
	}
}

func runCordon(ctx context.Context, r *cardRun) error {
	changes, err := r.cordon(ctx, false)
	if err != nil {
		return err
	}
	r.report("", changes)
	return nil
}

func (r *cardRun) cordon(ctx context.Context, dryRun bool) ([]cardChange, error) {
	return changeCordons(ctx, r.client, r.node, dryRun, func(inv *api.NodeInventory, cur *api.NodeCordons) (*api.NodeCordons, []cardChange, error) {
		cards, err := resolveCards(r.node, inv, r.cards)
		if err != nil {
			return nil, nil, err
		}
		next, changes := cordonCards(cur, cards, r.f.reason, r.setReason, r.env.Now())
		return next, changes, nil
	})
}

func runUncordon(ctx context.Context, r *cardRun) error {
	changes, err := changeCordons(ctx, r.client, r.node, false, func(inv *api.NodeInventory, cur *api.NodeCordons) (*api.NodeCordons, []cardChange, error) {
		cards, err := resolveCards(r.node, inv, r.cards)
		if err != nil {
			return nil, nil, err
		}
		next, changes := uncordonCards(cur, cards)
		return next, changes, nil
	})
	if err != nil {
		return err
	}
	r.report("", changes)
	return nil
}

// runDrain cordons the cards first, as kubectl drain cordons the node, so that what
// replaces the evicted pods is placed on other cards.
func runDrain(ctx context.Context, r *cardRun) error {
	verb := ""
	if r.f.dryRun {
		verb = "(dry run) "
	}
	changes, err := r.cordon(ctx, r.f.dryRun)
	if err != nil {
		return err
	}
	r.report(verb, changes)
	cards := make([]api.Card, len(changes))
	for i, c := range changes {
		cards[i] = c.card
	}
	warn := func(s string) { fmt.Fprintf(r.env.Stderr, "warning: %s\n", s) }
	args, _, _, err := vgpuArgs(ctx, r.client, r.o, false, warn)
	var bad *pluginargs.InvalidError
	if errors.As(err, &bad) {
		warn(fmt.Sprintf("%v (the scheduler uses the defaults for these too)", bad.Err))
	} else if err != nil {
		return err
	}
	pods, err := podsOnNode(ctx, r.client, r.node)
	if err != nil {
		return err
	}
	victims, unreadable := drainVictims(pods, r.node, cards, args.Resources)
	for _, u := range unreadable {
		warn("not evicted, its cards cannot be read: " + u)
	}
	if r.f.dryRun {
		for _, v := range victims {
			fmt.Fprintf(r.env.Stdout, "%swould evict %s (card %s)\n", verb, v, strings.Join(v.cards, ", card "))
		}
		fmt.Fprintf(r.env.Stdout, "%s%s: %d pods hold card %s\n", verb, r.node, len(victims), cardList(cards))
		return nil
	}
	d := &drainer{client: r.client, out: r.env.Stdout, deadline: time.Now().Add(r.f.timeout)}
	if err := d.drain(ctx, victims); err != nil {
		return fmt.Errorf("drain %s card %s: %w", r.node, cardList(cards), err)
	}
	fmt.Fprintf(r.env.Stdout, "%s: card %s drained: %d pods gone\n", r.node, cardList(cards), len(victims))
	return nil
}
