// helm-render renders a chart template as Helm's engine does — Go's text/template with
// sprig's functions, Helm's `include` and its handling of missing keys — for the tests
// of the templates node-manager renders (deploy/node-manager/*), without Helm itself.
//
// Usage: helm-render VALUES.json TEMPLATE [HELPERS...]
// The values are the template's dot (`.Values`, `.nodeGroup`, `.zoneName`, …); helpers
// are files of `define`d templates. The rendered text is written to stdout; a `fail` or
// any error to stderr with exit status 1.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig" // Debian's golang-github-masterminds-sprig-dev (3.2.3), built in GOPATH mode
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: helm-render VALUES.json TEMPLATE [HELPERS...]")
		os.Exit(2)
	}
	raw, err := os.ReadFile(os.Args[1])
	check(err)
	var values map[string]interface{}
	check(json.Unmarshal(raw, &values))

	root := template.New("root")
	funcs := sprig.TxtFuncMap()
	// Helm's include: a defined template rendered to a string (so it can be piped).
	funcs["include"] = func(name string, data interface{}) (string, error) {
		var buf bytes.Buffer
		err := root.ExecuteTemplate(&buf, name, data)
		return buf.String(), err
	}
	// Helm renders a missing key as nothing (missingkey=zero, then "<no value>" erased).
	root = root.Funcs(funcs).Option("missingkey=zero")
	for _, helper := range os.Args[3:] {
		text, err := os.ReadFile(helper)
		check(err)
		_, err = root.New(helper).Parse(string(text))
		check(err)
	}
	text, err := os.ReadFile(os.Args[2])
	check(err)
	main, err := root.New(os.Args[2]).Parse(string(text))
	check(err)
	var out bytes.Buffer
	check(main.Execute(&out, values))
	fmt.Print(strings.ReplaceAll(out.String(), "<no value>", ""))
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
