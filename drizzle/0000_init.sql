CREATE TABLE `api_keys` (
	`id` text PRIMARY KEY NOT NULL,
	`name` text NOT NULL,
	`hash` text NOT NULL,
	`prefix` text NOT NULL,
	`created_at` integer NOT NULL,
	`revoked_at` integer,
	`expires_at` integer,
	`allowed_origins` text,
	`allowed_models` text,
	`rpm` integer,
	`tpm` integer,
	`spend_limit_nanos` integer,
	`spend_limit_period` text,
	`max_tokens` integer,
	`metadata` text
);
--> statement-breakpoint
CREATE UNIQUE INDEX `api_keys_hash_unique` ON `api_keys` (`hash`);--> statement-breakpoint
CREATE INDEX `api_keys_created_idx` ON `api_keys` (`created_at`);--> statement-breakpoint
CREATE TABLE `usage_records` (
	`request_id` text PRIMARY KEY NOT NULL,
	`key_id` text NOT NULL,
	`model` text NOT NULL,
	`node` text,
	`prompt_tokens` integer NOT NULL,
	`completion_tokens` integer NOT NULL,
	`cost_nanos` integer NOT NULL,
	`status` text NOT NULL,
	`estimated` integer NOT NULL,
	`search_count` integer DEFAULT 0 NOT NULL,
	`created_at` integer NOT NULL
);
--> statement-breakpoint
CREATE INDEX `usage_key_created_idx` ON `usage_records` (`key_id`,`created_at`);--> statement-breakpoint
CREATE INDEX `usage_created_idx` ON `usage_records` (`created_at`);