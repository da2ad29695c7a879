// compose_check loads a Compose file with compose-go, the loader Docker Compose v2 uses, once without profiles and
// once per profile the file declares, so every service of every profile is validated against the Compose
// Specification without a Docker engine. It exits non-zero with the loader's message on the first failure.
//
// Usage: compose_check FILE
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

func load(ctx context.Context, file string, profiles []string) (*types.Project, error) {
	options, err := cli.NewProjectOptions(
		[]string{file},
		cli.WithWorkingDirectory(filepath.Dir(file)),
		cli.WithOsEnv,
		cli.WithProfiles(profiles),
		cli.WithResolvedPaths(true),
	)
	if err != nil {
		return nil, err
	}
	return options.LoadProject(ctx)
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: compose_check FILE")
		os.Exit(2)
	}
	file, err := filepath.Abs(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx := context.Background()
	everything, err := load(ctx, file, []string{"*"})
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s (all profiles): %v\n", file, err)
		os.Exit(1)
	}
	seen := map[string]bool{}
	for _, service := range everything.Services {
		for _, profile := range service.Profiles {
			seen[profile] = true
		}
	}
	profiles := []string{""}
	for profile := range seen {
		profiles = append(profiles, profile)
	}
	sort.Strings(profiles[1:])
	for _, profile := range profiles {
		var active []string
		name := "no profile"
		if profile != "" {
			active, name = []string{profile}, "profile "+profile
		}
		project, err := load(ctx, file, active)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s (%s): %v\n", file, name, err)
			os.Exit(1)
		}
		fmt.Printf("%s: %d services ok (%s)\n", name, len(project.Services), project.ServiceNames())
	}
}
