from evolve.bench.app import main

main()
