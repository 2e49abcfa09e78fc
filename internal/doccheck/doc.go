// Package doccheck holds one test: every Go name and file path that the docs (README.md,
// docs/*.md) and the code's comments point at still exists. A rename that leaves a comment or
// a page naming the old identifier fails the unit stage, with the place and the name.
package doccheck
