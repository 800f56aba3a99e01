// Package spawn runs a function as n ranks, each in a process of its own,
// in the style of torch.multiprocessing.spawn: the parent re-executes the
// current program n times with the environment of env://, and each child
// calls the function with its rank, joins the job with dist.Init and
// exits.
//
//	func main() {
//		// Code here runs in the parent and in every child, as a Python
//		// script's top level does under mp.spawn: keep it cheap.
//		err := spawn.Run(4, func(rank int) error {
//			g, err := dist.Init(context.Background(), dist.Options{}) // env://
//			if err != nil {
//				return err
//			}
//			defer g.Destroy()
//			...
//		})
//		if err != nil { // only the parent gets here: a *spawn.Error
//			log.Fatal(err)
//		}
//	}
//
// It is apart from package dist, as torch.multiprocessing is apart from
// torch.distributed, because starting and watching processes is a
// launcher's work: it links package launch, whose init runs the
// launcher's watchdog and gate when the binary is re-executed as one, and
// a program that only joins a job (every program that imports dist, rpc
// or ddp) should link none of that.
package spawn
